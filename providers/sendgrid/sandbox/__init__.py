"""The sandbox's imitation of SendGrid: ``POST /v3/mail/send``, ``Authorization: Bearer``,
a JSON body of ``personalizations``/``from``/``subject``/``content``; ``202`` with
``X-Message-Id`` and no body; errors ``{"errors": [{"message", "field", "help"}]}``; a 429 carries
``X-RateLimit-Reset`` (Unix seconds). No idempotency key: every request is a new mail,
recorded under its ``custom_args.dedupe_key``
(https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send). A dynamic
template (``template_id`` with ``personalizations[0].dynamic_template_data``: no subject or
content needed) is recorded in the ledger as ``provider_template`` and ``template_data``.
A key it does not accept: 401 "The provided authorization grant is invalid, expired, or
revoked"; a spent quota: 401 "Maximum credits exceeded".

Its events: a JSON array of ``{"email", "timestamp", "event": "delivered"|"bounce"|
"spamreport", "type"?: "bounce"|"blocked", "sg_event_id", "sg_message_id"}``; the message
id with the ``.filter...`` suffix SendGrid appends
(https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event), signed with
ECDSA P-256/SHA-256 over ``timestamp + body``, a base64 DER signature
(https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features).
"""

from __future__ import annotations

import argparse
import base64
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from mailbus.kernel.errors import ConfigError
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
    private_key,
    unix_of,
)

__all__ = ["IMITATION", "SendGridDialect", "SendGridSigner", "sendgrid_headers"]


class SendGridDialect(Dialect):
    name = "sendgrid"
    key_required = False
    deduplicates = False

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = json_object(body)
        if isinstance(doc, str):
            return doc
        try:
            to = doc["personalizations"][0]["to"][0]["email"]
            sender = doc["from"]["email"]
        except (KeyError, IndexError, TypeError):
            return "The personalizations, to and from fields are required."
        if not (isinstance(to, str) and "@" in to and isinstance(sender, str) and "@" in sender):
            return "Does not contain a valid address."
        template = doc.get("template_id")
        data = doc["personalizations"][0].get("dynamic_template_data")
        if template is not None and not (isinstance(template, str) and template):
            return "The template_id must be a non-empty string."
        if data is not None and not isinstance(data, dict):
            return "The dynamic_template_data must be an object."
        if template is None and (not isinstance(doc.get("subject"), str) or not doc.get("content")):
            return "The subject and content are required."  # a template gives both
        custom = doc.get("custom_args")
        tag = custom.get("dedupe_key") if isinstance(custom, dict) else None
        return ParsedSend(
            None,
            to,
            template if template is not None else doc["subject"],
            tag if isinstance(tag, str) else None,
            provider_template=template,
            template_data=data,
        )

    def error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        status = 400 if status == 422 else status  # SendGrid refuses a mail with a 400
        body = {"errors": [{"message": message, "field": None, "help": None}]}
        return web.json_response(body, status=status, headers=headers)

    def rate_limited(self, retry_after: int, scope: str | None) -> web.Response:
        headers = {
            "X-RateLimit-Limit": "600",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(int(time.time()) + retry_after),
        }
        return self.error(429, "rate_limited", "too many requests", headers)

    def accepted(self, message_id: str) -> web.Response:
        return web.Response(status=202, headers={"X-Message-Id": message_id})

    def malformed(self, message_id: str) -> web.Response:
        return web.Response(status=202)  # accepted, but the id header is missing

    def refused_key(self) -> web.Response:
        return _error(401, "The provided authorization grant is invalid, expired, or revoked")

    def quota_spent(self, retry_after: int) -> web.Response:
        return _error(401, "Maximum credits exceeded")


def _error(status: int, message: str) -> web.Response:
    return json_reply(status, {"errors": [{"message": message, "field": None, "help": None}]})


def sendgrid_headers(
    private_key: ec.EllipticCurvePrivateKey, body: bytes, timestamp: int
) -> dict[str, str]:
    signature = private_key.sign(str(timestamp).encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": str(timestamp),
    }


@dataclass(frozen=True)
class SendGridSigner:
    key: ec.EllipticCurvePrivateKey

    def sign(self, event: Event, to: str, now: int) -> Signed:
        item: dict[str, Any] = {
            "email": to,
            "timestamp": int(unix_of(event)),
            "sg_event_id": event["id"],
            "sg_message_id": f"{event['message_id']}.filter0001.16648.5515E0B88.0",
        }
        if event["type"] == "bounced":
            kind = "bounce" if event["bounce"] == "hard" else "blocked"
            item |= {"event": "bounce", "type": kind}
        else:
            item["event"] = "delivered" if event["type"] == "delivered" else "spamreport"
        body = body_of([item])
        return Signed(body, {**sendgrid_headers(self.key, body, now), **JSON})


def signer(args: argparse.Namespace) -> SendGridSigner | None:
    """SendGrid's events, with ``--sendgrid-signing-key`` given."""
    if not args.sendgrid_signing_key:
        return None
    key = private_key("--sendgrid-signing-key", args.sendgrid_signing_key)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError("--sendgrid-signing-key", "must be an EC (P-256) private key")
    return SendGridSigner(key)


def options(events: argparse._ArgumentGroup) -> None:
    events.add_argument(
        "--sendgrid-signing-key", metavar="PEM", help="EC P-256 private key (SendGrid's events)"
    )


IMITATION = Imitation({"/v3/mail/send": SendGridDialect()}, signer=signer, options=options)
