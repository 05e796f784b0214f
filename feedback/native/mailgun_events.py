"""Mailgun's webhooks: the signature inside the body, and its event data, pure.

Documented at https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks
and https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-payloads:
the body is ``{"signature": {"timestamp", "token", "signature"}, "event-data": {...}}``;
``signature`` is the hex HMAC-SHA256 of ``timestamp + token`` (no separator) under the
webhook signing key. A request more than :data:`TOLERANCE_S` from now is stale.

Events: ``delivered``; ``failed`` with ``severity`` ``permanent`` (a hard bounce) or
``temporary`` (Mailgun retries: deferred); ``complained``. Others (accepted, opened,
clicked, unsubscribed...) are skipped. The event id is ``event-data.id``; the message is
``event-data.message.headers.message-id``, without the angle brackets of the send API's
``id`` (``<...>``), which are stripped on both sides.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from mailbus.feedback.events import InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document, unix_instant
from mailbus.feedback.signature import Verdict, timely

__all__ = ["TOLERANCE_S", "parse", "sign", "verify"]

TOLERANCE_S = 300


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
    timestamp, token, digest = (signature.get(k) for k in ("timestamp", "token", "signature"))
    if not all(isinstance(v, str) and v for v in (timestamp, token, digest)):
        return Verdict(False, "malformed")
    assert isinstance(timestamp, str) and isinstance(token, str) and isinstance(digest, str)
    if not hmac.compare_digest(sign(key, timestamp, token).encode(), digest.lower().encode()):
        return Verdict(False, "mismatch")
    return timely(timestamp, now, TOLERANCE_S)


def parse(body: bytes) -> Inbound:
    document = json_document(body)
    data = document.get("event-data") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise InvalidEventError("event-data", "must be an object")
    kind = data.get("event")
    if kind == "delivered":
        event_type, bounce = "delivered", None
    elif kind == "complained":
        event_type, bounce = "complained", None
    elif kind == "failed":
        severity = data.get("severity")
        if severity == "permanent":
            event_type, bounce = "bounced", "hard"
        elif severity == "temporary":
            event_type, bounce = "deferred", None
        else:
            raise InvalidEventError("severity", "a failure must be permanent or temporary")
    else:
        return Inbound(skipped=1)
    return Inbound(
        (
            make_event(
                data.get("id"),
                event_type,
                _message_id(data),
                unix_instant(data.get("timestamp")),
                bounce,
            ),
        )
    )


def _message_id(data: dict[str, Any]) -> object:
    message = data.get("message")
    headers = message.get("headers") if isinstance(message, dict) else None
    value = headers.get("message-id") if isinstance(headers, dict) else None
    return value.strip().removeprefix("<").removesuffix(">") if isinstance(value, str) else None
