"""The sandbox's imitation of Resend: ``POST /emails``, ``Authorization: Bearer``, an optional
``Idempotency-Key`` (without one every request is a new mail); ``200 {"id"}``; errors
``{"statusCode", "name", "message"}``; a 429 carries ``retry-after`` and ``ratelimit-reset``
(https://resend.com/docs/api-reference/introduction, .../rate-limit). A key it does not
accept: 403 ``invalid_api_key``; a spent quota: 429 ``daily_quota_exceeded`` with
``retry-after`` (https://resend.com/docs/api-reference/errors).

Its events: ``{"type": "email.delivered"|"email.bounced"|"email.complained", "created_at",
"data": {"email_id", "to", "bounce"?}}``, the event id in ``svix-id``
(https://resend.com/docs/webhooks/event-types), signed as Svix does
(https://docs.svix.com/receiving/verifying-payloads/how-manual):
``base64(HMAC-SHA256(base64decode(secret without "whsec_"), "<id>.<t>.<body>"))`` in
``svix-signature: v1,<sig>``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mailbus.providers.sandbox.dialect import (
    Dialect,
    Imitation,
    ParsedSend,
    json_object,
    json_reply,
)
from mailbus.providers.sandbox.events import (
    JSON,
    Event,
    Signed,
    body_of,
    secret_from_env,
)

__all__ = ["IMITATION", "ResendDialect", "ResendSigner", "svix_headers"]


class ResendDialect(Dialect):
    name = "resend"
    key_required = False

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = json_object(body)
        if isinstance(doc, str):
            return doc
        to = doc.get("to")
        recipients = [to] if isinstance(to, str) else to
        if not (
            isinstance(recipients, list)
            and recipients
            and all(isinstance(r, str) and "@" in r for r in recipients)
        ):
            return "Invalid `to` field."
        for field in ("from", "subject"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                return f"Missing `{field}` field."
        key = request.headers.get("Idempotency-Key") or None
        return ParsedSend(key, recipients[0], str(doc["subject"]))

    def error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        name = _RESEND_NAMES.get(code, code)
        body = {"statusCode": status, "name": name, "message": message}
        return web.json_response(body, status=status, headers=headers)

    def rate_limited(self, retry_after: int, scope: str | None) -> web.Response:
        headers = {"retry-after": str(retry_after), "ratelimit-reset": str(retry_after)}
        return self.error(429, "rate_limited", "Too many requests.", headers)

    def refused_key(self) -> web.Response:
        body = {"statusCode": 403, "name": "invalid_api_key", "message": "API key is invalid"}
        return json_reply(403, body)

    def quota_spent(self, retry_after: int) -> web.Response:
        message = "You have reached your daily email sending quota."
        body = {"statusCode": 429, "name": "daily_quota_exceeded", "message": message}
        return json_reply(429, body, {"retry-after": str(retry_after)})


_RESEND_NAMES = {  # the sandbox's error codes as Resend names them
    "unauthorized": "restricted_api_key",
    "bad_request": "validation_error",
    "unprocessable": "validation_error",
    "unavailable": "internal_server_error",
    "rate_limited": "rate_limit_exceeded",
    "internal": "internal_server_error",
}


def svix_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {"svix-id": msg_id, "svix-timestamp": str(timestamp), "svix-signature": f"v1,{digest}"}


_RESEND_TYPES = {"delivered": "email.delivered", "bounced": "email.bounced"}


@dataclass(frozen=True)
class ResendSigner:
    secret: str  # whsec_...

    def sign(self, event: Event, to: str, now: int) -> Signed:
        data: dict[str, Any] = {"email_id": event["message_id"], "to": [to]}
        if event["type"] == "bounced":
            kind = "Permanent" if event["bounce"] == "hard" else "Transient"
            data["bounce"] = {"type": kind, "subType": "General", "message": "sandbox"}
        kind = _RESEND_TYPES.get(event["type"], "email.complained")
        body = body_of({"type": kind, "created_at": event["occurred_at"], "data": data})
        return Signed(body, {**svix_headers(self.secret, event["id"], now, body), **JSON})


def signer(args: argparse.Namespace) -> ResendSigner | None:
    """Resend's events, with MAILBUS_RESEND_WEBHOOK_SECRET (or its _FILE) set."""
    value = secret_from_env("MAILBUS_RESEND_WEBHOOK_SECRET")
    return ResendSigner(value) if value else None


IMITATION = Imitation({"/emails": ResendDialect()}, signer=signer)
