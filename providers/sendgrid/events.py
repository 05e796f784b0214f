"""SendGrid's signed Event Webhook, its ECDSA signature checked with ``cryptography``
(no SDK), and its batches of events, pure.

Signing (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features):
ECDSA P-256 with SHA-256 over ``timestamp + raw body``; the base64 DER signature in
``X-Twilio-Email-Event-Webhook-Signature``, the timestamp in
``X-Twilio-Email-Event-Webhook-Timestamp``; the verification key is the base64 DER public
key the account settings show. SendGrid retries a post it got no 2xx for "at increasing
intervals for up to 24 hours after the event occurs"
(https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/troubleshooting) and
does not say that a retry is signed anew; the signature covers the body and every event is
applied once by its ``sg_event_id``, so a replay changes nothing: a request is stale only
past :data:`TOLERANCE_S` (25 h).

Batches: the parser takes up to :data:`MAX_EVENTS` events (the route's body limit,
8 MiB, holds that many at SendGrid's documented event size); an item that cannot be
read (no ``sg_event_id``, no ``sg_message_id``...) is counted as ``invalid`` and the rest
of the batch is kept, since a 400 would make SendGrid retry, and lose, all of it.

Events (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event): the body
is a JSON array; ``delivered``, ``deferred``, ``bounce`` (``type`` ``bounce``: hard;
``blocked``: soft), ``spamreport`` (complained), ``dropped`` (dropped with its ``reason``:
"Bounced Address" suppresses all mail, "Unsubscribed Address" and "Spam Reporting
Address" bulk mail; "Invalid", "Spam Content"... nothing); the others (processed, open,
click...) are skipped. The adapter's ``custom_args`` come back as fields of each event:
``dedupe_key`` names the send, so an ``unknown`` send is settled by its events
(:meth:`mailbus.feedback.store.EventStore.record`). The event id is ``sg_event_id``; the
message is ``sg_message_id`` cut before its ``.filter``/``.recvd-`` suffix, which is the
``X-Message-Id`` the send API answered.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_public_key

from mailbus.feedback.events import DeliveryEvent, InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document, unix_instant
from mailbus.feedback.signature import Verdict, timely

__all__ = ["MAX_EVENTS", "TOLERANCE_S", "Verifier", "parse"]

TOLERANCE_S = 25 * 3600
SIGNATURE = "X-Twilio-Email-Event-Webhook-Signature"  # base64 DER ECDSA, P-256 and SHA-256
TIMESTAMP = "X-Twilio-Email-Event-Webhook-Timestamp"  # signed: the timestamp, then the body
DEDUPE_ARG = "dedupe_key"  # the custom_args the adapter sends; SendGrid adds it to each event
MAX_EVENTS = 10_000
_DROPS = {
    "Bounced Address": "hard_bounce",
    "Unsubscribed Address": "unsubscribed",
    "Spam Reporting Address": "complaint",
}
_SUFFIX = re.compile(r"\.(?:filter|recvd-).*\Z", re.DOTALL)


class Verifier:
    """Checks requests against one verification key (base64 DER, as SendGrid shows it)."""

    def __init__(self, public_key: str) -> None:
        try:
            key = load_der_public_key(base64.b64decode(public_key, validate=True))
        except (ValueError, binascii.Error, UnsupportedAlgorithm) as exc:
            raise ValueError(f"not a SendGrid verification key: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError("not a SendGrid verification key: not an elliptic-curve key")
        self._key = key

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> Verdict:
        signature = headers.get(SIGNATURE)
        stamp = headers.get(TIMESTAMP)
        if not signature or not stamp:
            return Verdict(False, "missing")
        try:
            der = base64.b64decode(signature, validate=True)
            signed = stamp.encode() + body
        except (ValueError, binascii.Error):
            return Verdict(False, "malformed")
        try:
            self._key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return Verdict(False, "mismatch")
        return timely(stamp, now, TOLERANCE_S)


def parse(body: bytes) -> Inbound:
    document = json_document(body)
    if not isinstance(document, list) or len(document) > MAX_EVENTS:
        raise InvalidEventError("body", f"must be a JSON array of at most {MAX_EVENTS} events")
    events: list[DeliveryEvent] = []
    skipped = invalid = 0
    for item in document:
        try:
            event = _event(item)
        except InvalidEventError:
            invalid += 1
            continue
        if event is None:
            skipped += 1
        else:
            events.append(event)
    return Inbound(tuple(events), skipped, invalid=invalid)


def _event(item: object) -> DeliveryEvent | None:
    if not isinstance(item, dict):
        raise InvalidEventError("body", "every event must be an object")
    kind = item.get("event")
    bounce = reason = suppression = None
    if kind == "dropped":
        event_type, reason = "dropped", item.get("reason")
        suppression = _DROPS.get(str(reason))
    elif kind in ("delivered", "deferred"):
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
        item.get("sg_event_id"),
        event_type,
        message_id,
        unix_instant(item.get("timestamp")),
        bounce,
        reason=reason,
        suppression=suppression,
        dedupe_key=item.get(DEDUPE_ARG),
    )
