"""Delivery events as values: parsing and checking a webhook body, pure.

A body is one JSON object::

    {"id": "evt_1", "type": "bounced", "message_id": "msg_9",
     "occurred_at": "2026-12-01T06:30:00Z", "bounce": "hard"}

``type`` is ``delivered``, ``deferred``, ``bounced`` (with ``bounce`` ``hard`` or ``soft``)
or ``complained``. Unknown extra fields are ignored (providers add their own). A body that
is not of this form raises :class:`InvalidEventError` naming the field; nothing is stored.
An identifier with a lone surrogate (JSON can escape one, ``"\\ud800"``; no UTF-8 text and
no ``jsonb`` can hold it) is refused here, so it fails its own request with 400 instead of
the whole batch it would join in PostgreSQL with 503.

Ordering: a row shows its latest event. Events are ordered by ``occurred_at``; two events
of one message at the same instant are ordered by :attr:`DeliveryEvent.rank`
(deferred < delivered < bounced < complained), so the outcome does not depend on the order
they arrive in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mailbus.kernel.errors import MailbusError

__all__ = [
    "EVENT_TYPES",
    "STATUS_RANK",
    "DeliveryEvent",
    "InvalidEventError",
    "make_event",
    "parse_event",
]

EVENT_TYPES = ("delivered", "deferred", "bounced", "complained")
# Tie-break of two events at the same instant; the SQL guard reads the same order.
STATUS_RANK = ("deferred", "delivered", "bounced", "complained")
BOUNCE_KINDS = ("hard", "soft")
MAX_ID_LENGTH = 512


class InvalidEventError(MailbusError):
    """A webhook body that is not a delivery event; ``field`` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class DeliveryEvent:
    event_id: str
    type: str
    message_id: str
    occurred_at: datetime  # timezone-aware
    bounce: str | None = None  # "hard" or "soft" for a bounce, else None

    @property
    def delivery_status(self) -> str:
        """What ``email_sends.delivery_status`` shows after this event."""
        return self.type

    @property
    def rank(self) -> int:
        """1-based position in :data:`STATUS_RANK` (the SQL's ``array_position``)."""
        return STATUS_RANK.index(self.type) + 1

    @property
    def suppresses(self) -> bool:
        """A hard bounce or a complaint puts the address on the suppression list."""
        return self.type == "complained" or (self.type == "bounced" and self.bounce == "hard")

    @property
    def suppression_reason(self) -> str:
        return "complaint" if self.type == "complained" else f"{self.bounce}_bounce"


def parse_event(body: bytes) -> DeliveryEvent:
    """The event in ``body``, or :class:`InvalidEventError`."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise InvalidEventError("body", "is not JSON") from None
    if not isinstance(document, dict):
        raise InvalidEventError("body", "must be a JSON object")
    event_type = document.get("type")
    if event_type not in EVENT_TYPES:
        raise InvalidEventError("type", f"must be one of {', '.join(EVENT_TYPES)}")
    bounce = None
    if event_type == "bounced":
        bounce = document.get("bounce")
        if bounce not in BOUNCE_KINDS:
            raise InvalidEventError("bounce", "a bounce must say 'hard' or 'soft'")
    return DeliveryEvent(
        event_id=_identifier(document, "id"),
        type=event_type,
        message_id=_identifier(document, "message_id"),
        occurred_at=_instant(document.get("occurred_at")),
        bounce=bounce,
    )


def make_event(
    event_id: object,
    event_type: str,
    message_id: object,
    occurred_at: datetime | object,
    bounce: str | None = None,
) -> DeliveryEvent:
    """A provider's event as the internal one, its identifiers and time (a datetime, or an
    ISO-8601 string) checked as :func:`parse_event` checks them (:mod:`mailbus.feedback.native`
    parses each provider's body)."""
    if not isinstance(occurred_at, datetime):
        occurred_at = _instant(occurred_at)
    if occurred_at.tzinfo is None:
        occurred_at = occurred_at.replace(tzinfo=UTC)
    return DeliveryEvent(
        event_id=_checked(event_id, "id"),
        type=event_type,
        message_id=_checked(message_id, "message_id"),
        occurred_at=occurred_at,
        bounce=bounce,
    )


def _identifier(document: dict[str, Any], name: str) -> str:
    return _checked(document.get(name), name)


def _checked(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEventError(name, "must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidEventError(name, f"longer than {MAX_ID_LENGTH} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise InvalidEventError(name, "contains control characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800"), which jsonb refuses
            raise InvalidEventError(name, "is not valid Unicode (a lone surrogate)") from None
    return value


def _instant(value: object) -> datetime:
    if not isinstance(value, str) or not 10 <= len(value) <= 64:
        raise InvalidEventError("occurred_at", "must be an ISO-8601 time")
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidEventError("occurred_at", "must be an ISO-8601 time") from None
    if instant.tzinfo is None:  # naive: UTC, as everywhere in mailbus
        instant = instant.replace(tzinfo=UTC)
    return instant
