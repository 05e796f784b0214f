"""The sandbox's imitation of Resend: ``POST /emails``, ``Authorization: Bearer``, an optional
``Idempotency-Key`` (without one every request is a new mail); ``200 {"id"}``; errors
``{"statusCode", "name", "message"}``; a 429 carries ``retry-after`` and ``ratelimit-reset``
(https://resend.com/docs/api-reference/introduction, .../rate-limit). A key it does not
accept: 403 ``invalid_api_key``; a spent quota: 429 ``daily_quota_exceeded`` with
``retry-after`` (https://resend.com/docs/api-reference/errors).
"""

from __future__ import annotations

from aiohttp import web

from mailbus.providers.sandbox_dialect import (
    Dialect,
    Imitation,
    ParsedSend,
    json_object,
    json_reply,
)

__all__ = ["IMITATION", "ResendDialect"]


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


IMITATION = Imitation({"/emails": ResendDialect()})
