"""The providers' APIs the sandbox speaks besides its own: request and reply shapes, auth.

Each :class:`Dialect` reads a send request into ``(idempotency key, to, template)`` or the
reason it is malformed, and writes the replies: accepted (with the message id), an error
(in that provider's error shape), and a malformed 2xx. :mod:`mailbus.sandbox.app` applies the
fault plan and the ledger between the two, the same for every dialect, so every fault
kind works in each.

* ``mailbus`` -- docs/reference/contract.md#email-api: ``POST /v1/send``, the key required.
* ``resend`` -- ``POST /emails``, ``Authorization: Bearer``, an optional ``Idempotency-Key``
  (without one every request is a new mail); ``200 {"id"}``; errors ``{"statusCode",
  "name", "message"}``; a 429 carries ``retry-after`` and ``ratelimit-reset``
  (https://resend.com/docs/api-reference/introduction, .../rate-limit).
* ``sendgrid`` -- ``POST /v3/mail/send``, ``Authorization: Bearer``, a JSON body of
  ``personalizations``/``from``/``subject``/``content``; ``202`` with ``X-Message-Id`` and
  no body; errors ``{"errors": [{"message", "field", "help"}]}``; a 429 carries
  ``X-RateLimit-Reset`` (Unix seconds). No idempotency key: every request is a new mail,
  recorded under its ``custom_args.dedupe_key``
  (https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send).
* ``mailgun`` -- ``POST /v3/{domain}/messages``, basic auth ``api:<key>``, a
  ``multipart/form-data`` (or urlencoded) form; ``200 {"id": "<...>", "message"}``; errors
  ``{"message"}``; a 429 says "try again after <date>" in its message. No idempotency key:
  every request is a new mail, recorded under its ``v:dedupe_key``
  (https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages).
* ``postmark`` -- ``POST /email``, ``X-Postmark-Server-Token``; no idempotency key: every
  request is a new mail, filed under its ``Metadata.mailbus_key`` so that ``GET
  /messages/outbound?count=&offset=&metadata_mailbus_key=`` finds it; ``200 {"To",
  "SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"}``; errors ``{"ErrorCode",
  "Message"}``, a rejected mail as ``422`` with ErrorCode 300
  (https://postmarkapp.com/developer/api/email-api, .../api/overview#error-codes,
  .../api/messages-api). A 429 carries ``Retry-After`` (Postmark documents none: the
  sandbox's choice, so the fault plan's delay can be read). ``POST /email/withTemplate``
  takes ``TemplateAlias`` (or ``TemplateId``) and the ``TemplateModel`` object instead of
  a subject and bodies (https://postmarkapp.com/developer/api/templates-api).

SendGrid's ``template_id`` with ``personalizations[0].dynamic_template_data`` (a dynamic
template: no subject or content needed), and Postmark's template, are recorded in the
ledger as ``provider_template`` and ``template_data``.
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["DIALECTS", "POSTMARK_KEY_FIELD", "Dialect", "ParsedSend"]

_BOUNDARY = re.compile(r"boundary=(\"[^\"]+\"|[^;\s]+)")
_FIELD_NAME = re.compile(rb'(?i)content-disposition:[^\r\n]*\bname="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ParsedSend:
    """``key`` deduplicates (an idempotency key); ``tag`` only names the mail in the ledger
    (a provider without keys: a second request under it is a second mail)."""

    key: str | None
    to: str
    template: str
    tag: str | None = None
    provider_template: str | None = None  # sent by the provider's own template
    template_data: dict[str, Any] | None = None


class Dialect:
    """The sandbox's own API (docs/reference/contract.md#email-api); subclasses are other
    providers'."""

    name = "mailbus"
    key_required = True
    deduplicates = True  # the same key again replays the first mail

    def key_of(self, request: web.Request) -> str | None:
        """The key a request carries before its body is read (for the ledger's count)."""
        return request.headers.get("Idempotency-Key") or None

    def authorized(self, request: web.Request, api_key: str) -> bool:
        return request.headers.get("Authorization") == f"Bearer {api_key}"

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        """The send, or why it is malformed."""
        doc = _json_object(body)
        if isinstance(doc, str):
            return doc
        to, template = doc.get("to"), doc.get("template")
        if not isinstance(to, str) or not to:
            return "'to' must be a non-empty string"
        if not isinstance(template, str) or not template:
            return "'template' must be a non-empty string"
        if not isinstance(doc.get("variables", {}), dict):
            return "'variables' must be an object"
        return ParsedSend(request.headers.get("Idempotency-Key") or None, to, template)

    def error(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        body = {"error": code, "message": message}
        return web.json_response(body, status=status, headers=headers)

    def rate_limited(self, retry_after: int, scope: str | None) -> web.Response:
        headers = {"Retry-After": str(retry_after)}
        if scope is not None:  # a mailbox provider deferring us for its domain
            headers["X-Throttle-Scope"] = "recipient-domain"
            return self.error(429, "rate_limited", f"too many requests to {scope}", headers)
        return self.error(429, "rate_limited", "too many requests", headers)

    def accepted(self, message_id: str) -> web.Response:
        return web.json_response({"id": message_id})

    def malformed(self, message_id: str) -> web.Response:
        truncated = b'{"id": "' + message_id[:10].encode()
        return web.Response(body=truncated, content_type="application/json")


class ResendDialect(Dialect):
    name = "resend"
    key_required = False

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = _json_object(body)
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


class PostmarkDialect(Dialect):
    name = "postmark"
    key_required = False
    deduplicates = False  # no idempotency: a second request is a second mail

    def key_of(self, request: web.Request) -> str | None:
        return None  # in the body's Metadata

    def authorized(self, request: web.Request, api_key: str) -> bool:
        return request.headers.get("X-Postmark-Server-Token") == api_key

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = _json_object(body)
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


class PostmarkTemplateDialect(PostmarkDialect):
    """``POST /email/withTemplate``: the mail by a template kept at Postmark."""

    name = "postmark-template"

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = _json_object(body)
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


POSTMARK_KEY_FIELD = "mailbus_key"  # the metadata field mailbus files a mail under


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
    key = metadata.get(POSTMARK_KEY_FIELD)
    return (key if isinstance(key, str) and key else None,)


_POSTMARK_CODES = {  # the sandbox's error codes as Postmark's ErrorCode
    "unauthorized": 10,
    "bad_request": 300,
    "unprocessable": 300,
    "unavailable": 100,
    "rate_limited": 429,
    "internal": 0,  # Postmark documents no ErrorCode for its 500
}

_RESEND_NAMES = {  # the sandbox's error codes as Resend names them
    "unauthorized": "restricted_api_key",
    "bad_request": "validation_error",
    "unprocessable": "validation_error",
    "unavailable": "internal_server_error",
    "rate_limited": "rate_limit_exceeded",
    "internal": "internal_server_error",
}


class SendGridDialect(Dialect):
    name = "sendgrid"
    key_required = False
    deduplicates = False

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        doc = _json_object(body)
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


class MailgunDialect(Dialect):
    name = "mailgun"
    key_required = False
    deduplicates = False

    def authorized(self, request: web.Request, api_key: str) -> bool:
        token = base64.b64encode(f"api:{api_key}".encode()).decode()
        return request.headers.get("Authorization") == f"Basic {token}"

    def parse(self, request: web.Request, body: bytes) -> ParsedSend | str:
        form = _form(request.headers.get("Content-Type", ""), body)
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


DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        Dialect(),
        ResendDialect(),
        PostmarkDialect(),
        PostmarkTemplateDialect(),
        SendGridDialect(),
        MailgunDialect(),
    )
}


def _form(content_type: str, body: bytes) -> dict[str, str] | str:
    """A ``multipart/form-data`` or urlencoded form as ``{name: value}`` (the first of
    each name), or why it cannot be read."""
    if content_type.startswith("application/x-www-form-urlencoded"):
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {name: value for name, value in reversed(pairs)}
    boundary = _BOUNDARY.search(content_type) if content_type.startswith("multipart/") else None
    if boundary is None:
        return f"Invalid request content type: {content_type or 'none'}"
    delimiter = b"--" + boundary.group(1).strip('"').encode()
    form: dict[str, str] = {}
    # a hand-cut parser: email.parser took 4 ms a request, the sandbox's whole budget
    for part in body.split(delimiter)[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, separator, value = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        name = _FIELD_NAME.search(head)
        if not separator or name is None:
            return "malformed multipart/form-data request"
        form.setdefault(
            name.group(1).decode(), value.removesuffix(b"\r\n").decode("utf-8", "replace")
        )
    return form


def _json_object(body: bytes) -> dict[str, Any] | str:
    try:
        doc = json.loads(body)
    except ValueError:
        return "body is not JSON"
    if not isinstance(doc, dict):
        return "body must be a JSON object"
    return doc
