"""The sandbox's imitation of Mailgun: ``POST /v3/{domain}/messages``, basic auth ``api:<key>``, a
``multipart/form-data`` (or urlencoded) form; ``200 {"id": "<...>", "message"}``; errors
``{"message"}``; a 429 says "try again after <date>" in its message. No idempotency key:
every request is a new mail, recorded under its ``v:dedupe_key``
(https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages). A key
it does not accept: 401 ``Forbidden`` (text); a spent quota, which Mailgun documents no
reply for: 403 "Domain is not allowed to send".

Its events: ``{"signature", "event-data": {"event": "delivered"|"failed"|"complained",
"severity"?, "reason"?, "id", "timestamp", "recipient", "message": {"headers":
{"message-id"}}}}``, the ``signature.token`` one per event; a hard bounce is a
``permanent`` failure for reason ``bounce``, a soft one a ``temporary`` failure, which
Mailgun retries (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-payloads);
signed with the hex HMAC-SHA256 of ``timestamp + token`` under the signing key
(https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mailbus.providers.sandbox.dialect import Dialect, Imitation, ParsedSend, json_reply, read_form
from mailbus.providers.sandbox.events import (
    JSON,
    Event,
    Signed,
    body_of,
    secret_from_env,
    unix_of,
)

__all__ = ["IMITATION", "MailgunDialect", "MailgunSigner", "mailgun_signature"]


class MailgunDialect(Dialect):
    name = "mailgun"
    key_required = False
    deduplicates = False

    def authorized(self, request: web.Request, api_key: str) -> bool:
        token = base64.b64encode(f"api:{api_key}".encode()).decode()
        return request.headers.get("Authorization") == f"Basic {token}"

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        form = read_form(request.headers.get("Content-Type", ""), body)
        if isinstance(form, str):
            return form
        for field in ("from", "to"):
            if "@" not in form.get(field, ""):
                return f"{field} parameter is not a valid address. please check documentation"
        if not (form.get("text") or form.get("html")):
            return "Need at least one of 'text' or 'html' parameters specified"
        return ParsedSend(None, form["to"], form.get("subject", ""), form.get("v:dedupe_key"))

    def error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        status = 400 if status == 422 else status
        return web.json_response({"message": message}, status=status, headers=headers)

    def rate_limited(self, retry_after: int, scope: str | None) -> web.Response:
        when = time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(time.time() + retry_after))
        message = f"Domain is not allowed to send: request limit exceeded, try again after {when}"
        return self.error(429, "rate_limited", message)

    def accepted(self, message_id: str) -> web.Response:
        return web.json_response({"id": f"<{message_id}>", "message": "Queued. Thank you."})

    def refused_key(self) -> web.Response:
        return web.Response(status=401, text="Forbidden")

    def quota_spent(self, retry_after: int) -> web.Response:
        return json_reply(403, {"message": "Domain is not allowed to send: sending limit exceeded"})


def mailgun_signature(key: str, timestamp: int, token: str) -> dict[str, str]:
    digest = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {"timestamp": str(timestamp), "token": token, "signature": digest}


@dataclass(frozen=True)
class MailgunSigner:
    key: str  # the HTTP webhook signing key

    def sign(self, event: Event, to: str, now: int) -> Signed:
        data: dict[str, Any] = {
            "id": event["id"],
            "timestamp": unix_of(event),
            "recipient": to,
            "message": {"headers": {"message-id": event["message_id"]}},
        }
        if event["type"] == "bounced":
            hard = event["bounce"] == "hard"
            data |= {
                "event": "failed",
                "severity": "permanent" if hard else "temporary",
                "reason": "bounce" if hard else "generic",
            }
        else:
            data["event"] = event["type"]  # delivered, complained
        # one token per event, kept across repeats (the receiver's event id); a new
        # timestamp and signature each time it is posted
        token = hashlib.sha256(event["id"].encode()).hexdigest()[:50]
        body = body_of({"signature": mailgun_signature(self.key, now, token), "event-data": data})
        return Signed(body, JSON.copy())


def signer(args: argparse.Namespace) -> MailgunSigner | None:
    """Mailgun's events, with MAILBUS_MAILGUN_WEBHOOK_KEY (or its _FILE) set."""
    value = secret_from_env("MAILBUS_MAILGUN_WEBHOOK_KEY")
    return MailgunSigner(value) if value else None


IMITATION = Imitation({"/v3/{domain}/messages": MailgunDialect()}, signer=signer)
