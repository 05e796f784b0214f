"""Delivery events as values: parsing and checking a webhook body, pure.

A body is one JSON object::

    {"id": "evt_1", "type": "bounced", "message_id": "msg_9",
     "occurred_at": "2026-12-01T06:30:00Z", "bounce": "hard"}

``type`` is ``delivered``, ``deferred``, ``bounced`` (with ``bounce`` ``hard`` or ``soft``),
``complained`` or ``dropped`` (the provider accepted the mail and then did not send it; an
optional ``reason`` says why). Unknown extra fields are ignored (providers add their own). A
body that is not of this form raises :class:`InvalidEventError` naming the field; nothing is
stored. An identifier with a lone surrogate (JSON can escape one, ``"\\ud800"``; no UTF-8
text and no ``jsonb`` can hold it) is refused here, so it fails its own request with 400
instead of the whole batch it would join in PostgreSQL with 503.

Ordering: a row shows its latest event. Events are ordered by ``occurred_at``; two events
of one message at the same instant are ordered by :attr:`DeliveryEvent.rank`
(deferred < delivered < dropped < bounced < complained), so the outcome does not depend on
the order they arrive in.

Suppression: a hard bounce suppresses the address for all mail (``hard_bounce``), a
complaint for bulk mail (``complaint``); a provider's event may name its own suppression
instead (:attr:`DeliveryEvent.suppression`: a Mailgun drop for an address on its
unsubscribe list is ``unsubscribed``, bulk only; see :mod:`mailbus.feedback.native`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mailbus.kernel.errors import MailbusError

__all__ = [
    "EVENT_TYPES",
    "NAMED_PROVIDERS",
    "STATUS_RANK",
    "SUPPRESSIONS",
    "DeliveryEvent",
    "InvalidEventError",
    "clip_reason",
    "make_event",
    "parse_event",
]

EVENT_TYPES = ("delivered", "deferred", "bounced", "complained", "dropped")
# Tie-break of two events at the same instant; the SQL guard reads the same order.
STATUS_RANK = ("deferred", "delivered", "dropped", "bounced", "complained")
BOUNCE_KINDS = ("hard", "soft")
# email_suppressions.reason values an event may add (their scope: migration 0019)
SUPPRESSIONS = ("hard_bounce", "complaint", "unsubscribed")
MAX_ID_LENGTH = 512
MAX_REASON_LENGTH = 200
# The providers whose own events come at POST /webhooks/{name} (mailbus.feedback.native);
# any other name is a Mailbus-Signature sender's.
NAMED_PROVIDERS = ("ses", "sendgrid", "mailgun", "postmark", "resend")


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
    reason: str | None = None  # the provider's own words for a drop or a failure
    suppression: str | None = None  # one of SUPPRESSIONS, instead of the type's own
    dedupe_key: str | None = None  # the send's key as the provider echoes it, if it does

    @property
    def proves_acceptance(self) -> bool:
        """The provider took the mail: it delivered, delayed, bounced or was complained
        about (a drop may follow a refusal, so it proves nothing)."""
        return self.type in ("delivered", "deferred", "bounced", "complained")

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
        """A hard bounce, a complaint or a named suppression puts the address on the list."""
        return self.suppression_reason is not None

    @property
    def suppression_reason(self) -> str | None:
        """The ``email_suppressions.reason`` this event adds, or None."""
        if self.suppression is not None:
            return self.suppression
        if self.type == "complained":
            return "complaint"
        return "hard_bounce" if self.type == "bounced" and self.bounce == "hard" else None


def parse_event(body: bytes) -> DeliveryEvent:
    """The event in ``body``, or :class:`InvalidEventError`."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
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
        reason=clip_reason(document.get("reason")),
    )


def clip_reason(value: object) -> str | None:
    """A provider's reason as stored: printable, at most :data:`MAX_REASON_LENGTH`."""
    if not isinstance(value, str):
        return None
    text = "".join(ch if ch.isprintable() else " " for ch in value).strip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which jsonb refuses
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text[:MAX_REASON_LENGTH] or None


def make_event(
    event_id: object,
    event_type: str,
    message_id: object,
    occurred_at: datetime | object,
    bounce: str | None = None,
    reason: object = None,
    suppression: str | None = None,
    dedupe_key: object = None,
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
        reason=clip_reason(reason),
        suppression=suppression,
        dedupe_key=_checked(dedupe_key, "dedupe_key") if isinstance(dedupe_key, str) else None,
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
