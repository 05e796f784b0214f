"""Postmark's webhooks: HTTP basic auth, and its per-record payloads, pure.

Postmark signs nothing: the webhook URL carries credentials (``https://user:pass@host/...``,
https://postmarkapp.com/email-webhooks: "secure them using HTTP Auth"), so the check is the
``Authorization: Basic`` header against the configured ``user:password``, in constant time.
No timestamp is signed, so nothing is stale; repeats are caught by the event id.

Records (https://postmarkapp.com/developer/webhooks/delivery-webhook and the bounce and
spam-complaint webhooks beside it): ``RecordType`` ``Delivery`` (``MessageID``,
``Recipient``, ``DeliveredAt``; no id of its own, so the event id is
``Delivery:<MessageID>:<Recipient>``, one per recipient), ``Bounce`` (``ID``, ``Type``,
``BouncedAt``: ``HardBounce`` and ``BadEmailAddress`` are hard; ``SoftBounce``,
``Transient``, ``DnsError`` soft; the other types, auto-replies and the like, are skipped)
and ``SpamComplaint`` (``ID``, ``BouncedAt``). Open, Click, SubscriptionChange are skipped.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from mailbus.feedback.events import InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document
from mailbus.feedback.signature import Verdict

__all__ = ["parse", "verify"]

_HARD = frozenset({"HardBounce", "BadEmailAddress"})
_SOFT = frozenset({"SoftBounce", "Transient", "DnsError"})


def verify(authorization: str | None, credentials: str) -> Verdict:
    """``authorization`` is the request's header; ``credentials`` is ``user:password``."""
    if not authorization:
        return Verdict(False, "missing")
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return Verdict(False, "malformed")
    try:
        given = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return Verdict(False, "malformed")
    if not hmac.compare_digest(given, credentials.encode()):
        return Verdict(False, "mismatch")
    return Verdict(True)


def parse(body: bytes) -> Inbound:
    document = json_document(body)
    if not isinstance(document, dict):
        raise InvalidEventError("body", "must be a JSON object")
    record = document.get("RecordType")
    message_id = document.get("MessageID")
    if record == "Delivery":
        recipient = document.get("Recipient")
        event_id = f"Delivery:{message_id}:{recipient}"
        event = make_event(event_id, "delivered", message_id, document.get("DeliveredAt"))
    elif record == "SpamComplaint":
        event = make_event(_id(document), "complained", message_id, document.get("BouncedAt"))
    elif record == "Bounce" and document.get("Type") in _HARD | _SOFT:
        bounce = "hard" if document.get("Type") in _HARD else "soft"
        event = make_event(_id(document), "bounced", message_id, document.get("BouncedAt"), bounce)
    else:
        return Inbound(skipped=1)
    return Inbound((event,))


def _id(document: dict[str, object]) -> str:
    value = document.get("ID")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidEventError("ID", "must be a number")
    return f"{document.get('RecordType')}:{value}"
