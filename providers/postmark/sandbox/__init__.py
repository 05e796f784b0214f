"""The sandbox's imitation of Postmark: ``POST /email``, ``X-Postmark-Server-Token``; no
idempotency key: every request is a new mail, filed under its ``Metadata.mailbus_key`` so
that ``GET /messages/outbound?count=&offset=&metadata_mailbus_key=`` finds it (after
``search_lag_s``, as Postmark's search shows a mail some time after accepting it); ``200
{"To", "SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"}``; errors
``{"ErrorCode", "Message"}``, a rejected mail as ``422`` with ErrorCode 300
(https://postmarkapp.com/developer/api/email-api, .../api/overview#error-codes,
.../api/messages-api). A 429 carries ``Retry-After`` (Postmark documents none: the
sandbox's choice, so the fault plan's delay can be read). ``POST /email/withTemplate``
takes ``TemplateAlias`` (or ``TemplateId``) and the ``TemplateModel`` object instead of a
subject and bodies (https://postmarkapp.com/developer/api/templates-api), recorded in the
ledger as ``provider_template`` and ``template_data``. A key it does not accept: 401,
ErrorCode 10 "Bad or missing API token"; a spent quota, which Postmark documents no reply
for: 422, ErrorCode 405 "Not allowed to send".

Its events: one record, ``Delivery`` / ``Bounce`` (``HardBounce``/``SoftBounce``) /
``SpamComplaint``, its numeric ``ID`` derived from the event id
(https://postmarkapp.com/developer/webhooks/bounce-webhook), behind basic auth credentials
in the webhook URL (https://postmarkapp.com/email-webhooks).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mailbus.kernel.errors import ConfigError
from mailbus.providers.postmark.sending import METADATA_FIELD  # where mailbus files a mail
from mailbus.providers.sandbox.dialect import (
    Dialect,
    Imitation,
    ParsedSend,
    SandboxView,
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

__all__ = [
    "IMITATION",
    "PostmarkDialect",
    "PostmarkSigner",
    "PostmarkTemplateDialect",
    "basic_authorization",
]


class PostmarkDialect(Dialect):
    name = "postmark"
    key_required = False
    deduplicates = False  # no idempotency: a second request is a second mail

    def key_of(self, request: web.Request) -> str | None:
        return None  # in the body's Metadata

    def authorized(self, request: web.Request, api_key: str) -> bool:
        return request.headers.get("X-Postmark-Server-Token") == api_key

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = json_object(body)
        if isinstance(doc, str):
            return doc
        refusal = _postmark_refusal(doc, "From", "Subject")
        if refusal is not None:
            return refusal
        if not (isinstance(doc.get("TextBody"), str) or isinstance(doc.get("HtmlBody"), str)):
            return "Provide either email TextBody or HtmlBody or both."
        key = _postmark_key(doc)
        if isinstance(key, str):
            return key
        return ParsedSend(key[0], doc["To"], str(doc["Subject"]))

    def error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        body = {"ErrorCode": _POSTMARK_CODES.get(code, 0), "Message": message}
        return web.json_response(body, status=status, headers=headers)

    def accepted(self, message_id: str) -> web.Response:
        return web.json_response(
            {"To": "", "SubmittedAt": "", "MessageID": message_id, "ErrorCode": 0, "Message": "OK"}
        )

    def malformed(self, message_id: str) -> web.Response:
        truncated = b'{"To": "", "MessageID": "' + message_id[:10].encode()
        return web.Response(body=truncated, content_type="application/json")

    def refused_key(self) -> web.Response:
        return json_reply(401, {"ErrorCode": 10, "Message": "Bad or missing API token"})

    def quota_spent(self, retry_after: int) -> web.Response:
        message = "Not allowed to send: your account has run out of credits."
        return json_reply(422, {"ErrorCode": 405, "Message": message})


class PostmarkTemplateDialect(PostmarkDialect):
    """``POST /email/withTemplate``: the mail by a template kept at Postmark."""

    name = "postmark-template"

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = json_object(body)
        if isinstance(doc, str):
            return doc
        refusal = _postmark_refusal(doc, "From")
        if refusal is not None:
            return refusal
        template = doc.get("TemplateAlias") or doc.get("TemplateId")
        if not isinstance(template, (str, int)) or isinstance(template, bool):
            return "Either 'TemplateId' or 'TemplateAlias' is required."
        model = doc.get("TemplateModel")
        if not isinstance(model, dict):
            return "The 'TemplateModel' field is required and must be an object."
        key = _postmark_key(doc)
        if isinstance(key, str):
            return key
        return ParsedSend(
            key[0],
            doc["To"],
            str(template),
            provider_template=str(template),
            template_data=model,
        )


def _postmark_refusal(doc: dict[str, Any], *required: str) -> str | None:
    """Postmark's message for a body without a valid To or one of ``required``, else None."""
    to = doc.get("To")
    if not isinstance(to, str) or "@" not in to:
        return "Invalid 'To' address."
    for field in required:
        if not isinstance(doc.get(field), str) or not doc[field]:
            return f"Missing '{field}' field."
    return None


def _postmark_key(doc: dict[str, Any]) -> tuple[str | None] | str:
    """(mailbus's key from the body's Metadata,), or Postmark's message for bad Metadata."""
    metadata = doc.get("Metadata", {})
    if not isinstance(metadata, dict):
        return "Metadata must be an object."
    key = metadata.get(METADATA_FIELD)
    return (key if isinstance(key, str) and key else None,)


_POSTMARK_CODES = {  # the sandbox's error codes as Postmark's ErrorCode
    "unauthorized": 10,
    "bad_request": 300,
    "unprocessable": 300,
    "unavailable": 100,
    "rate_limited": 429,
    "internal": 0,  # Postmark documents no ErrorCode for its 500
}


async def search(request: web.Request, state: SandboxView) -> web.Response:
    """Postmark's outbound message search, by the one metadata field mailbus files a mail
    under: ``{"TotalCount", "Messages": [{"MessageID", "Metadata", ...}]}``."""
    ledger = state.ledger
    dialect = _SENDS["/email"]
    key = request.query.get(f"metadata_{METADATA_FIELD}") or None
    record = ledger.arrive(key, "lookup")
    try:
        if not state.authorized(request, dialect):
            ledger.settle(record, "unauthorized")
            return dialect.refused_key()
        if not (request.query.get("count", "").isdigit() and "offset" in request.query):
            ledger.settle(record, "bad_request")
            return dialect.error(422, "bad_request", "count and offset are required")
        count = int(request.query["count"])
        matches = [] if key is None else ledger.search(key, state.search_lag_s)
        ledger.settle(record, "found" if matches else "not_found")
        messages = [
            {"MessageID": message_id, "Metadata": {METADATA_FIELD: held}}
            for held, message_id in matches[:count]
        ]
        return web.json_response({"TotalCount": len(matches), "Messages": messages})
    finally:
        ledger.depart()


_SENDS = {"/email": PostmarkDialect(), "/email/withTemplate": PostmarkTemplateDialect()}


def basic_authorization(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _number(event: Event) -> int:
    """A stable positive number for the event id (Postmark's records have numeric ids)."""
    return int.from_bytes(hashlib.sha256(event["id"].encode()).digest()[:6], "big")


@dataclass(frozen=True)
class PostmarkSigner:
    user: str
    password: str

    def sign(self, event: Event, to: str, now: int) -> Signed:
        at, message_id = event["occurred_at"], event["message_id"]
        record: dict[str, Any]
        if event["type"] == "delivered":
            record = {"RecordType": "Delivery", "Recipient": to, "DeliveredAt": at}
        elif event["type"] == "bounced":
            hard = event["bounce"] == "hard"
            record = {
                "RecordType": "Bounce",
                "ID": _number(event),
                "Type": "HardBounce" if hard else "SoftBounce",
                "TypeCode": 1 if hard else 4096,
                "Email": to,
                "BouncedAt": at,
            }
        else:
            record = {"RecordType": "SpamComplaint", "ID": _number(event), "Email": to}
            record["BouncedAt"] = at
        body = body_of({**record, "MessageID": message_id})
        authorization = basic_authorization(self.user, self.password)
        return Signed(body, {"Authorization": authorization, **JSON})


def signer(args: argparse.Namespace) -> PostmarkSigner | None:
    """Postmark's events, with MAILBUS_POSTMARK_WEBHOOK_AUTH (or its _FILE) set."""
    value = secret_from_env("MAILBUS_POSTMARK_WEBHOOK_AUTH")
    if not value:
        return None
    user, colon, password = value.partition(":")
    if not colon:
        raise ConfigError("MAILBUS_POSTMARK_WEBHOOK_AUTH", "expected user:password")
    return PostmarkSigner(user, password)


IMITATION = Imitation(_SENDS, {"/messages/outbound": search}, signer)
