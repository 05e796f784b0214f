"""Mailgun's webhooks: the signature inside the body, and its event data, pure.

Documented at https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
and https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-payloads:
the body is ``{"signature": {"timestamp", "token", "signature"}, "event-data": {...}}``;
``signature`` is the hex HMAC-SHA256 of ``timestamp + token`` (no separator) under the
webhook signing key. It does not cover the body, so Mailgun asks receivers to "cache the
token value locally and not honor any subsequent request with the same token":
:func:`token` gives the token and a digest of the event data, which the route remembers
in PostgreSQL (``webhook_tokens``); the same token with other event data is a replay.

Tolerance: Mailgun retries a webhook it got no 200 (or 406) for after 10 min, 10 min,
15 min, 30 min, 1 h, 2 h and 4 h (https://help.mailgun.com/hc/en-us/articles/202236504-Webhooks)
and does not say that a retry is signed anew; the securing-webhooks page warns that
"there can be delays in webhook processing that are outside of Mailgun's control". So a
request is stale only past :data:`TOLERANCE_S` (9 h: the whole schedule and a margin), and
tokens are remembered that long.

Events (https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-types):
``delivered``; ``complained``; ``failed`` with ``severity`` ``temporary`` (Mailgun
retries: deferred) or ``permanent``, read by its ``reason`` ("hard bounces, messages that
reached their retry limit, previously unsubscribed/bounced/complained addresses, or
addresses rejected by an ESP"): ``bounce`` (or none) is a hard bounce; ``suppress-bounce``,
``suppress-unsubscribe`` and ``suppress-complaint`` are drops for an address on Mailgun's
own list, which add the matching suppression (all mail; bulk only; bulk only); ``old``
(the retry limit) and any other reason are drops without a suppression; ``rejected``
("Mailgun rejected the request to send") is a drop. Others (accepted, opened, clicked,
unsubscribed...) are skipped. The event id is ``signature.token``, as django-anymail does:
``event-data.id`` is only "unique within a day". The send's ``v:dedupe_key`` comes back in
``user-variables`` and names the send, so an ``unknown`` send is settled by its events. The
message is
``event-data.message.headers.message-id``, without the angle brackets of the send API's
``id`` (``<...>``), which are stripped on both sides.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from mailbus.feedback.events import DeliveryEvent, InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document, unix_instant
from mailbus.feedback.signature import Verdict, timely

__all__ = ["TOLERANCE_S", "parse", "sign", "token", "verify"]

TOLERANCE_S = 9 * 3600
# failed/permanent reasons that are drops of an address on Mailgun's own list
_SUPPRESSED = {
    "suppress-bounce": "hard_bounce",
    "suppress-unsubscribe": "unsubscribed",
    "suppress-complaint": "complaint",
}


def sign(key: str, timestamp: str, token: str) -> str:
    """The hex digest Mailgun puts in ``signature.signature``."""
    return hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


def verify(body: bytes, key: str, now: float) -> Verdict:
    try:
        document = json_document(body)
    except InvalidEventError:
        return Verdict(False, "malformed")
    signature = document.get("signature") if isinstance(document, dict) else None
    if not isinstance(signature, dict):
        return Verdict(False, "missing")
    timestamp, token_, digest = (signature.get(k) for k in ("timestamp", "token", "signature"))
    if not all(isinstance(v, str) and v for v in (timestamp, token_, digest)):
        return Verdict(False, "malformed")
    assert isinstance(timestamp, str) and isinstance(token_, str) and isinstance(digest, str)
    if not hmac.compare_digest(sign(key, timestamp, token_).encode(), digest.lower().encode()):
        return Verdict(False, "mismatch")
    return timely(timestamp, now, TOLERANCE_S)


def token(body: bytes) -> tuple[str, bytes]:
    """A verified body's ``signature.token`` and the SHA-256 of its event data (canonical
    JSON), which the token must never be seen with another of."""
    document = json_document(body)
    data = json.dumps(document.get("event-data"), sort_keys=True, separators=(",", ":"))
    return str(document["signature"]["token"]), hashlib.sha256(data.encode()).digest()


def parse(body: bytes) -> Inbound:
    document = json_document(body)
    data = document.get("event-data") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise InvalidEventError("event-data", "must be an object")
    event = _event(data, document["signature"].get("token"))
    return Inbound(skipped=1) if event is None else Inbound((event,))


def _event(data: dict[str, Any], event_id: object) -> DeliveryEvent | None:
    kind, reason = data.get("event"), data.get("reason")
    bounce = suppression = None
    if kind in ("delivered", "complained"):
        event_type = str(kind)
    elif kind == "rejected":
        event_type, reason = "dropped", _rejection(data)
    elif kind == "failed":
        severity = data.get("severity")
        if severity not in ("permanent", "temporary"):
            raise InvalidEventError("severity", "a failure must be permanent or temporary")
        if reason == "old":  # the retry limit: Mailgun gave up, whatever the severity says
            event_type = "dropped"
        elif severity == "temporary":
            event_type = "deferred"
        elif reason in (None, "bounce"):
            event_type, bounce = "bounced", "hard"
        else:
            event_type, suppression = "dropped", _SUPPRESSED.get(str(reason))
    else:
        return None
    return make_event(
        event_id,
        event_type,
        _message_id(data),
        unix_instant(data.get("timestamp")),
        bounce,
        reason=_detail(reason, data),
        suppression=suppression,
        dedupe_key=_variable(data, "dedupe_key"),
    )


def _variable(data: dict[str, Any], name: str) -> object:
    """A ``v:<name>`` the send carried, echoed in ``user-variables``."""
    variables = data.get("user-variables")
    return variables.get(name) if isinstance(variables, dict) else None


def _rejection(data: dict[str, Any]) -> object:
    reject = data.get("reject")
    return reject.get("reason") if isinstance(reject, dict) else data.get("reason")


def _detail(reason: object, data: dict[str, Any]) -> str | None:
    status = data.get("delivery-status")
    description = status.get("description") if isinstance(status, dict) else None
    parts = [str(p) for p in (reason, description) if isinstance(p, str) and p]
    return ": ".join(parts) or None


def _message_id(data: dict[str, Any]) -> object:
    message = data.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get("message-id") if isinstance(headers, dict) else None
    return value.strip().removeprefix("<").removesuffix(">") if isinstance(value, str) else None
