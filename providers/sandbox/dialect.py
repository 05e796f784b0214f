"""How the sandbox speaks a provider's send API: request and reply shapes, auth; the
defaults are the sandbox's own API, each provider folder's ``sandbox/`` overrides them.

Each :class:`Dialect` reads a send request into ``(idempotency key, to, template)`` or the
reason it is malformed, and writes the replies: accepted (with the message id), an error
(in that provider's error shape), a malformed 2xx, and the account's refusals (a key it
does not accept, a spent quota: the provider's documented replies). :mod:`mailbus.sandbox.app`
applies the fault plan and the ledger between the two, the same for every dialect, so every
fault kind works in each. A provider folder gives the sandbox an :class:`Imitation`: its
send endpoints' dialects by path, and its look-up routes.

The own API (``mailbus``, docs/reference/contract.md#email-api): ``POST /v1/send``, the key
required; a key it does not accept: 401 ``{"error": "unauthorized"}``; a spent quota: 429
``{"error": "quota_exceeded"}`` with ``Retry-After``.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from mailbus.providers.sandbox.events import Signer

__all__ = [
    "Dialect",
    "Imitation",
    "ParsedSend",
    "SandboxView",
    "json_object",
    "json_reply",
    "read_form",
]

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
    """The sandbox's own API (docs/reference/contract.md#email-api); each provider's
    ``sandbox.py`` subclasses it."""

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
        doc = json_object(body)
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

    def refused_key(self) -> web.Response:
        """The reply to a key the account does not accept."""
        return json_reply(401, {"error": "unauthorized", "message": "missing or wrong API key"})

    def quota_spent(self, retry_after: int) -> web.Response:
        """The reply while the account's sending quota is spent."""
        body = {"error": "quota_exceeded", "message": "daily sending quota exceeded"}
        return json_reply(429, body, {"Retry-After": str(retry_after)})


class SandboxView(Protocol):
    """What a provider's look-up route reads of the sandbox's state
    (:class:`mailbus.sandbox.app.SandboxState`)."""

    ledger: Any  # mailbus.sandbox.ledger.Ledger
    search_lag_s: float

    def authorized(self, request: web.Request, dialect: Dialect) -> bool: ...


LookupRoute = Callable[[web.Request, SandboxView], Awaitable[web.Response]]


@dataclass(frozen=True)
class Imitation:
    """What the sandbox serves of one provider: ``sends``, the dialect of each send
    endpoint by its path; ``lookups``, its look-up routes (``GET``) by path; ``signer``,
    its delivery events' signer when the sandbox's options and environment configure one
    (``--native-events-to``: :mod:`mailbus.sandbox.emitter`); ``options``, the sandbox's
    command-line options it reads them from, added to the delivery events' group."""

    sends: Mapping[str, Dialect]
    lookups: Mapping[str, LookupRoute] = field(default_factory=dict)
    signer: Callable[[argparse.Namespace], Signer | None] | None = None
    options: Callable[[argparse._ArgumentGroup], None] | None = None


def json_reply(status: int, body: object, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )


def read_form(content_type: str, body: bytes) -> dict[str, str] | str:
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


def json_object(body: bytes) -> dict[str, Any] | str:
    try:
        doc = json.loads(body)
    except ValueError:
        return "body is not JSON"
    if not isinstance(doc, dict):
        return "body must be a JSON object"
    return doc
