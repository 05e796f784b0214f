"""SendGrid's signed Event Webhook, verified with the ``sendgrid`` library's own
``EventWebhook`` helper, and its batches of events, pure.

Signing (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features):
ECDSA P-256 with SHA-256 over ``timestamp + raw body``; the base64 DER signature in
``X-Twilio-Email-Event-Webhook-Signature``, the timestamp in
``X-Twilio-Email-Event-Webhook-Timestamp``; the verification key is the base64 DER public
key the account settings show. A valid request more than :data:`TOLERANCE_S` from now is
stale (SendGrid documents no window; 300 s as Svix and Stripe).

Events (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event): the body
is a JSON array; ``delivered``, ``deferred``, ``bounce`` (``type`` ``bounce``: hard;
``blocked``: soft), ``spamreport`` (complained); the others (processed, dropped, open,
click...) are skipped. The event id is ``sg_event_id``; the message is ``sg_message_id``
cut before its ``.filter``/``.recvd-`` suffix, which is the ``X-Message-Id`` the send API
answered.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from typing import Any

from sendgrid.helpers.eventwebhook import EventWebhook, EventWebhookHeader

from mailbus.feedback.events import DeliveryEvent, InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document, unix_instant
from mailbus.feedback.signature import Verdict, timely

__all__ = ["MAX_EVENTS", "TOLERANCE_S", "Verifier", "parse"]

TOLERANCE_S = 300
MAX_EVENTS = 10_000
_SUFFIX = re.compile(r"\.(?:filter|recvd-).*\Z", re.DOTALL)


class Verifier:
    """Checks requests against one verification key (base64 DER, as SendGrid shows it)."""

    def __init__(self, public_key: str) -> None:
        try:
            self._helper = EventWebhook(public_key)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"not a SendGrid verification key: {exc}") from None

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> Verdict:
        signature = headers.get(EventWebhookHeader.SIGNATURE)
        stamp = headers.get(EventWebhookHeader.TIMESTAMP)
        if not signature or not stamp:
            return Verdict(False, "missing")
        try:
            valid = self._helper.verify_signature(body.decode(), signature, stamp)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return Verdict(False, "malformed")
        if not valid:
            return Verdict(False, "mismatch")
        return timely(stamp, now, TOLERANCE_S)


def parse(body: bytes) -> Inbound:
    document = json_document(body)
    if not isinstance(document, list) or len(document) > MAX_EVENTS:
        raise InvalidEventError("body", f"must be a JSON array of at most {MAX_EVENTS} events")
    events: list[DeliveryEvent] = []
    skipped = 0
    for item in document:
        if not isinstance(item, dict):
            raise InvalidEventError("body", "every event must be an object")
        event = _event(item)
        if event is None:
            skipped += 1
        else:
            events.append(event)
    return Inbound(tuple(events), skipped)


def _event(item: dict[str, Any]) -> DeliveryEvent | None:
    kind = item.get("event")
    bounce = None
    if kind in ("delivered", "deferred"):
        event_type = str(kind)
    elif kind == "spamreport":
        event_type = "complained"
    elif kind == "bounce":
        event_type, bounce = "bounced", "soft" if item.get("type") == "blocked" else "hard"
    else:
        return None
    message = item.get("sg_message_id")
    message_id = _SUFFIX.sub("", message) if isinstance(message, str) else None
    return make_event(
        item.get("sg_event_id"), event_type, message_id, unix_instant(item.get("timestamp")), bounce
    )
