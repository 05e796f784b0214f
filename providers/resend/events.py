"""Resend's webhooks: Svix signatures, verified with the ``svix`` library, and Resend's
event payloads, pure but for the library's own clock.

Signing (https://resend.com/docs/webhooks/verify-webhooks-requests, which defers to Svix):
headers ``svix-id``, ``svix-timestamp``, ``svix-signature``; :class:`svix.webhooks.Webhook`
checks them (5 minutes either way, its own rule). The library checks the time before the
signature; so that a forged request is told from a stale one, a request whose timestamp is
outside :data:`TOLERANCE_S` of ``now`` has its signature compared with the library's own
``sign`` instead: a match is ``stale``, else ``mismatch`` (both 401).

Svix signs every attempt anew (Resend retries after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and
10 h: https://resend.com/docs/webhooks/retries-and-replays), so a stale request is answered
401 and the retry, freshly signed, is taken.

Events (https://resend.com/docs/webhooks/event-types): ``{"type": "email.bounced",
"created_at": ISO-8601, "data": {"email_id": ..., "bounce": {"type": "Permanent"|...}}}``.
``email.delivered`` → delivered, ``email.delivery_delayed`` → deferred, ``email.bounced`` →
bounced ("the recipient's mail server permanently rejected the email": hard, unless its
``bounce.type`` is ``Transient`` or ``Undetermined``; the documented example carries no
``bounce``), ``email.complained`` → complained, ``email.failed`` ("the email failed to send
due to an error") and ``email.suppressed`` (Resend blocked sending to the recipient) →
dropped, with the reason the event gives; the others (sent, opened, clicked...) are skipped.
The event id is the ``svix-id`` header (the same on every retry of one message); the message
is ``data.email_id``, the send API's ``id``."""

from __future__ import annotations

import base64
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime

from mailbus.feedback.events import InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document
from mailbus.feedback.signature import Verdict
from mailbus.kernel.extras import extra

with extra("resend"):
    from svix.webhooks import Webhook, WebhookVerificationError

__all__ = ["TOLERANCE_S", "parse", "signing_hook", "verify"]

TOLERANCE_S = 300  # svix's own, fixed in the library
_TYPES = {
    "email.delivered": "delivered",
    "email.delivery_delayed": "deferred",
    "email.bounced": "bounced",
    "email.complained": "complained",
    "email.failed": "dropped",
    "email.suppressed": "dropped",
}
_SOFT = frozenset({"Transient", "Undetermined"})


def signing_hook(secret: str) -> Webhook:
    """The verifier of one Svix signing secret; ValueError for one Svix refuses."""
    try:
        return Webhook(secret)
    except Exception as exc:  # svix refuses an empty or non-base64 secret, untyped
        raise ValueError(f"not a Svix signing secret: {exc}") from None


def verify(headers: Mapping[str, str], body: bytes, hook: Webhook, now: float) -> Verdict:
    """``hook`` is :func:`signing_hook`'s, built once."""
    msg_id, stamp, signatures = (
        headers.get(f"svix-{name}", "") for name in ("id", "timestamp", "signature")
    )
    if not (msg_id and stamp and signatures):
        return Verdict(False, "missing")
    try:
        moment = int(stamp)
    except ValueError:
        return Verdict(False, "malformed")
    if abs(now - moment) <= TOLERANCE_S:
        try:
            hook.verify(
                body, {"svix-id": msg_id, "svix-timestamp": stamp, "svix-signature": signatures}
            )
        except WebhookVerificationError as exc:
            return Verdict(False, "stale" if "timestamp" in str(exc) else "mismatch")
        except (ValueError, UnicodeDecodeError):
            return Verdict(False, "malformed")
        return Verdict(True)
    try:
        expected = hook.sign(msg_id, datetime.fromtimestamp(moment, UTC), body.decode())
    except (ValueError, OverflowError, OSError, UnicodeDecodeError):
        return Verdict(False, "malformed")
    wanted = base64.b64decode(expected.split(",", 1)[1])
    for entry in signatures.split():
        version, _, value = entry.partition(",")
        try:
            given = base64.b64decode(value, validate=True)
        except ValueError:
            continue
        if version == "v1" and hmac.compare_digest(wanted, given):
            return Verdict(False, "stale")
    return Verdict(False, "mismatch")


def parse(headers: Mapping[str, str], body: bytes) -> Inbound:
    document = json_document(body)
    if not isinstance(document, dict):
        raise InvalidEventError("body", "must be a JSON object")
    event_type = _TYPES.get(str(document.get("type")))
    if event_type is None:
        return Inbound(skipped=1)
    data = document.get("data")
    if not isinstance(data, dict):
        raise InvalidEventError("data", "must be an object")
    bounce = reason = None
    if event_type == "bounced":
        details = data.get("bounce")
        kind = details.get("type") if isinstance(details, dict) else None
        bounce = "soft" if kind in _SOFT else "hard"
    elif event_type == "dropped":
        reason = _reason(data, str(document.get("type")))
    event = make_event(
        headers.get("svix-id"),
        event_type,
        data.get("email_id"),
        document.get("created_at"),
        bounce,
        reason=reason,
    )
    return Inbound((event,))


def _reason(data: dict[str, object], kind: str) -> str:
    """``data.failed.reason`` (or ``data.suppressed``'s), else the event type."""
    details = data.get(kind.removeprefix("email."))
    for key in ("reason", "message", "type"):
        value = details.get(key) if isinstance(details, dict) else None
        if isinstance(value, str) and value:
            return value
    return kind
