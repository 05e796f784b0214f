"""What one verified provider request brings, as a value, and the JSON reading every
receiver shares, pure.

Client input never answers 500: :func:`json_document` refuses a body nested deeper than
:data:`MAX_DEPTH` before :func:`json.loads` sees it (``json.loads("[" * 200_000)`` raises
``RecursionError``, which is no ``ValueError``), and :func:`too_deep` lets a route refuse
such a body before it authenticates anything (docs/guides/delivery-events.md#limits).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mailbus.feedback.events import DeliveryEvent, InvalidEventError

__all__ = ["MAX_DEPTH", "Inbound", "json_document", "too_deep", "unix_instant"]

# Every provider's payload nests a handful of levels (SES through SNS: 5); 32 is plenty.
MAX_DEPTH = 32
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


@dataclass(frozen=True)
class Inbound:
    """The delivery events of one request, the provider events mailbus does not track
    (opens, clicks, ``processed``...: ``skipped``), the items of a batch that could not be
    read (``invalid``: the rest of the batch is kept), and for an SNS subscription
    handshake the URL that confirms it."""

    events: tuple[DeliveryEvent, ...] = ()
    skipped: int = 0
    subscribe_url: str | None = None
    invalid: int = 0


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``body`` opens more than ``limit`` arrays or objects inside each other
    (brackets inside JSON strings do not count); linear, no parsing."""
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub(b'""', body)):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def json_document(body: bytes) -> Any:
    """The JSON value of ``body``, or :class:`InvalidEventError` naming the body."""
    if too_deep(body):
        raise InvalidEventError("body", f"nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidEventError("body", "is not JSON") from None


def unix_instant(value: object, field: str = "timestamp") -> datetime:
    """Unix seconds (a JSON number) as an aware time, or :class:`InvalidEventError`."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise InvalidEventError(field, "must be unix seconds")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidEventError(field, "must be unix seconds") from None
