"""The sandbox's imitation of Mailgun: ``POST /v3/{domain}/messages``, basic auth ``api:<key>``, a
``multipart/form-data`` (or urlencoded) form; ``200 {"id": "<...>", "message"}``; errors
``{"message"}``; a 429 says "try again after <date>" in its message. No idempotency key:
every request is a new mail, recorded under its ``v:dedupe_key``
(https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages). A key
it does not accept: 401 ``Forbidden`` (text); a spent quota, which Mailgun documents no
reply for: 403 "Domain is not allowed to send".
"""

from __future__ import annotations

import base64
import time

from aiohttp import web

from mailbus.providers.sandbox_dialect import Dialect, Imitation, ParsedSend, json_reply, read_form

__all__ = ["IMITATION", "MailgunDialect"]


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


IMITATION = Imitation({"/v3/{domain}/messages": MailgunDialect()})
