"""What one verified provider request brings, as a value; shared by the provider parsers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mailbus.feedback.events import DeliveryEvent, InvalidEventError

__all__ = ["Inbound", "json_document", "unix_instant"]


@dataclass(frozen=True)
class Inbound:
    """The delivery events of one request, the provider events mailbus does not track
    (opens, clicks, ``processed``...: ``skipped``), and for an SNS subscription handshake
    the URL that confirms it."""

    events: tuple[DeliveryEvent, ...] = ()
    skipped: int = 0
    subscribe_url: str | None = None


def json_document(body: bytes) -> Any:
    """The JSON value of ``body``, or :class:`InvalidEventError` naming the body."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise InvalidEventError("body", "is not JSON") from None


def unix_instant(value: object, field: str = "timestamp") -> datetime:
    """Unix seconds (a JSON number) as an aware time, or :class:`InvalidEventError`."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise InvalidEventError(field, "must be unix seconds")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidEventError(field, "must be unix seconds") from None
