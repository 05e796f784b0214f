"""The HTTP provider adapter: the email API (docs/reference/contract.md#email-api), its calls
and replies turned into values.

:meth:`HttpProvider.send` returns a :data:`~mailbus.consumer.core.outcome.CallResult` and
:meth:`HttpProvider.lookup` a :class:`LookupResult`; neither raises for a network or HTTP problem:

=========================================================  ====================================
what happened                                              result
=========================================================  ====================================
any HTTP response                                          ``ProviderReply(status, id, ...)``
ConnectError, ConnectTimeout, PoolTimeout, ProxyError,     ``TransportFailure(sent=False)``
UnsupportedProtocol
ReadTimeout, WriteTimeout, ReadError, WriteError,          ``TransportFailure(sent=True)``
RemoteProtocolError, any other httpx error, the whole-     (a write error may have sent part
call deadline                                              of it: the safe reading)
=========================================================  ====================================

The exchange (:mod:`mailbus.consumer.http_wire`) raises the httpx exceptions of the table
whichever library carries the call. The read timeout is per chunk, so every call is also
bounded as a whole by ``request_timeout``; keep ``connect_timeout`` below it, or a slow
connect counts as sent.
The API key travels only in the ``Authorization`` header and is masked in every detail;
with ``key_file`` (MAILBUS_PROVIDER_API_KEY_FILE) it is read again when that file changes
(:class:`~mailbus.consumer.key_file.KeyFile`), so a rotated key is used from the next call.
A send made inside a traced mail's span carries the W3C ``traceparent`` (and ``tracestate``)
header of that span (docs/guides/tracing.md).

What goes on the wire is the provider's *dialect* (:class:`Dialect`): the sandbox's own
(:class:`MailbusDialect`, docs/reference/contract.md#email-api) by default, or a named provider's
(``providers/<name>/sending.py``: Resend, ...). The dialect encodes a mail, reads a reply into a
``ProviderReply`` (its error bodies and rate-limit headers included) and, if the provider
has one, does the look-up; the timeouts, the transport and the scrubbing of secrets are
this module's, shared by every dialect.

By default the calls go through :class:`~mailbus.consumer.aiohttp_transport.AiohttpTransport`:
httpx's own pool reaches about 600 sends/s at 64 in flight against a 50 ms provider, the
aiohttp transport about 1,150 (see the module docstring there). A mail is encoded once,
into an :class:`~mailbus.consumer.http_wire.HttpCall`, and its reply read from an
:class:`~mailbus.consumer.http_wire.HttpReply`: no ``httpx.Request`` or ``httpx.Response``
is built per mail (an httpx transport passed as ``transport`` is reached through
:class:`~mailbus.consumer.http_wire.HttpxExchange`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from mailbus.consumer.aiohttp_transport import AiohttpTransport
from mailbus.consumer.core.capability import Capability, IdempotencyKey
from mailbus.consumer.core.outcome import (
    ACCOUNT,
    QUOTA,
    CallResult,
    ProviderReply,
    TransportFailure,
    clip_reason,
    parse_retry_after,
)
from mailbus.consumer.http_wire import Exchange, HttpCall, HttpxExchange, Timeouts
from mailbus.consumer.key_file import KeyFile
from mailbus.consumer.templates import ProviderTemplate, Rendered
from mailbus.kernel import tracing
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus.kernel.settings import Settings
from mailbus_client.send_request import mail_headers

__all__ = [
    "Dialect",
    "Endpoint",
    "HttpProvider",
    "LookupResult",
    "MailbusDialect",
    "OutgoingMail",
    "PreparedMail",
    "WireRequest",
    "http_provider",
    "message_id_of",
]

_NOT_SENT: tuple[type[httpx.HTTPError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
)
_EXCERPT_BYTES = 16_384  # scrubbed whole, then clipped: a cut cannot leak part of a key
_REMEMBERED_PATHS = 64  # request paths whose URL a provider keeps (send paths are few)


@dataclass(frozen=True)
class OutgoingMail:
    """What one send carries to the provider."""

    key: str  # the key the provider sees: the row's provider key (mailbus/kernel/provider_key.py)
    to_address: str
    template: str
    variables: Mapping[str, Any]
    # decided by mailbus.consumer.content before encoding: None renders from the variables
    content: Rendered | ProviderTemplate | None = None


@dataclass(frozen=True)
class PreparedMail:
    """A mail encoded into its request: whatever could not be encoded failed already."""

    key: str
    call: HttpCall
    key_generation: int = 0  # which API key its headers carry (see HttpProvider.send)


@dataclass(frozen=True)
class LookupResult:
    """``message_id`` if the provider accepted the key; ``failed`` if the look-up said
    nothing (transport error, 5xx, 429, a malformed 200), ``detail`` saying why."""

    message_id: str | None
    failed: bool
    detail: str = ""


@dataclass(frozen=True)
class WireRequest:
    """One request of a dialect: a path under the base URL, and its own headers, query
    parameters and body."""

    method: str
    path: str
    headers: Mapping[str, str]
    params: Mapping[str, str] | None = None
    body: bytes | None = None


class Dialect(Protocol):
    """One provider's HTTP API: how a mail is encoded and a reply read. ``encode`` raises
    :class:`InvalidSendError` naming what cannot travel; ``lookup_request`` is called only
    when ``capability.look_up``."""

    capability: Capability

    def auth_headers(self, api_key: str) -> dict[str, str]: ...

    def encode(self, mail: OutgoingMail) -> WireRequest: ...

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply: ...

    def lookup_request(self, dedupe_key: str) -> WireRequest: ...

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        """The look-up's verdict; a hit counts only if it carries ``dedupe_key`` (the
        value looked up), never on the provider's matching alone."""
        ...


class MailbusDialect:
    """The sandbox's own API, docs/reference/contract.md#email-api (``MAILBUS_PROVIDER=http``)."""

    # the same key always gets the same id, for as long as the mail is kept; a look-up by
    # key, believed at once: a resend under the key cannot make a second mail anyway
    capability = Capability(
        IdempotencyKey("Idempotency-Key", None),
        look_up=True,
        source="docs/reference/contract.md#email-api",
        settle_s=0.0,
    )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def encode(self, mail: OutgoingMail) -> WireRequest:
        """The body ``{"to", "template", "variables"}`` under the ``Idempotency-Key`` header: a
        dedupe key that is not printable ASCII cannot be an HTTP header; a number JSON cannot
        carry, such as ``1e400`` stored in jsonb, cannot be a body; a ``headers`` variable
        must be an object of valid names to values without CR/LF, and is also sent as the
        body's top-level ``"headers"`` field, the mail headers the provider adds. A mail
        rendered from a local template also carries ``"subject"``, ``"text"`` and
        ``"html"``."""
        key = mail.key
        if not (key.isascii() and key.isprintable() and key.strip()):
            raise InvalidSendError(
                "dedupe_key", "must be printable ASCII to travel as the Idempotency-Key header"
            )
        document: dict[str, Any] = {
            "to": mail.to_address,
            "template": mail.template,
            "variables": mail.variables,
        }
        headers = mail.variables.get("headers")
        if headers is not None:  # e.g. List-Unsubscribe of a campaign: a top-level field
            document["headers"] = mail_headers(headers)
        if isinstance(mail.content, Rendered):  # a local template: sent rendered
            document["subject"] = mail.content.subject
            document["text"] = mail.content.text
            if mail.content.html is not None:
                document["html"] = mail.content.html
        elif mail.content is not None:
            raise InvalidSendError("template", "the http provider keeps no templates of its own")
        return WireRequest(
            "POST",
            "v1/send",
            {"Idempotency-Key": key, "Content-Type": "application/json"},
            body=json_body(document),
        )

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply:
        retry_after = parse_retry_after(headers.get("Retry-After"), now)
        if 200 <= status <= 299:
            return ProviderReply(status, message_id_of(body), retry_after)
        scope = headers.get("X-Throttle-Scope", "").strip().lower()
        excerpt = body[:_EXCERPT_BYTES].decode("utf-8", "replace")
        return ProviderReply(
            status,
            None,
            retry_after,
            excerpt,
            scope == "recipient-domain",
            server_stage=_account_state(status, body),
        )

    def lookup_request(self, dedupe_key: str) -> WireRequest:
        return WireRequest("GET", "v1/messages", {}, params={"idempotency_key": dedupe_key})

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        """404: not accepted; 200 ``{"id"}``: accepted, unless the reply names another
        ``idempotency_key`` than the one looked up (then no verdict)."""
        if status == 404:
            return LookupResult(None, False)
        if status == 200:
            message_id = message_id_of(body)
            named = _field(body, "idempotency_key")
            if named is not None and named != dedupe_key:
                return LookupResult(None, True, "http 200 for another idempotency key")
            if message_id is not None:
                return LookupResult(message_id, False)
            return LookupResult(None, True, "http 200 without a valid id")
        excerpt = body[:_EXCERPT_BYTES].decode("utf-8", "replace")
        return LookupResult(
            None, True, f"http {status}: {excerpt}" if excerpt else f"http {status}"
        )


def _account_state(status: int, body: bytes) -> str | None:
    """A reply about our account (docs/reference/contract.md#email-api): a 401 or 403 is
    the account's (a revoked or wrong key, a suspended sender), and a 429 whose ``error``
    is ``quota_exceeded`` is a sending quota, not a rate limit."""
    if status in (401, 403):
        return ACCOUNT
    if status == 429 and b"quota_exceeded" in body:
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        if isinstance(doc, dict) and doc.get("error") == "quota_exceeded":
            return QUOTA
    return None


def json_body(document: Any) -> bytes:
    """``document`` as a JSON body, or :class:`InvalidSendError` if JSON cannot carry it."""
    try:
        return json.dumps(document, ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidSendError("payload_json", f"not JSON the provider can read: {exc}") from None


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Endpoint:
    """Where an HTTP provider is reached and the key it is called with: MAILBUS_PROVIDER_URL
    and MAILBUS_PROVIDER_API_KEY(_FILE), a priority's own, or the fallback's; the key is
    read again from ``key_file`` when that changes."""

    url: str
    api_key: str
    key_file: str | None = None


def http_provider(
    settings: Settings, endpoint: Endpoint, dialect: Dialect | None = None
) -> HttpProvider:
    """The HTTP adapter at ``endpoint``, speaking ``dialect`` (mailbus's own API: None)."""
    return HttpProvider(
        endpoint.url,
        endpoint.api_key,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_in_flight,
        dialect=dialect,
        key_file=endpoint.key_file,
    )


class HttpProvider:
    """Sends and looks up mails at ``base_url`` with at most ``max_connections`` open, in
    ``dialect`` (the sandbox's own by default)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        connect_timeout: float,
        request_timeout: float,
        max_connections: int,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], datetime] = _utc_now,
        dialect: Dialect | None = None,
        key_file: str | None = None,
    ) -> None:
        url = httpx.URL(base_url) if _is_http_url(base_url) else None
        if url is None:
            raise ConfigError("MAILBUS_PROVIDER_URL", "must be an http(s) URL with a host")
        if not connect_timeout > 0:
            raise ConfigError("MAILBUS_CONNECT_TIMEOUT", "must be > 0")
        if not request_timeout > 0:
            raise ConfigError("MAILBUS_REQUEST_TIMEOUT", "must be > 0")
        if max_connections < 1:
            raise ConfigError("max_connections", "must be >= 1")
        if any(ch.isspace() for ch in api_key):
            raise ConfigError("MAILBUS_PROVIDER_API_KEY", "must not contain whitespace")
        self._api_key = api_key
        self._key_file = KeyFile(key_file, api_key) if key_file else None
        self._key_generation = 0
        self._earlier_keys: tuple[str, ...] = ()  # still scrubbed from details after a rotation
        self._request_timeout = request_timeout
        self._clock = clock
        self._dialect: Dialect = dialect if dialect is not None else MailbusDialect()
        self.capability = self._dialect.capability
        self._base = url
        self._urls: dict[str, str] = {}  # path -> its URL under the base, built once
        self._auth = self._dialect.auth_headers(api_key)
        self._headers = {**self._auth, "Accept": "application/json", "User-Agent": "mailbus"}
        # waiting for a free connection ("pool") sends nothing yet: the connect timeout
        timeouts = Timeouts(connect_timeout, request_timeout, connect_timeout)
        self._exchange: Exchange = (
            AiohttpTransport(max_connections, timeouts)
            if transport is None
            else HttpxExchange(transport, timeouts)
        )

    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        """Encode ``mail`` into its request, before any row is claimed for it; raises
        :class:`InvalidSendError` naming the field that cannot travel (see the dialect's
        ``encode``)."""
        self._refresh_key()
        call = self._call(self._dialect.encode(mail))
        return PreparedMail(mail.key, call, self._key_generation)

    def _refresh_key(self) -> None:
        """Take up a key the key file now holds (see :class:`KeyFile`)."""
        if self._key_file is None:
            return
        key = self._key_file.current()
        if key == self._api_key:
            return
        self._earlier_keys = (self._api_key, *self._earlier_keys)[:4]
        self._api_key = key
        self._key_generation += 1
        self._auth = self._dialect.auth_headers(key)
        self._headers = {**self._headers, **self._auth}

    def _call(self, wire: WireRequest) -> HttpCall:
        url = self._urls.get(wire.path)
        if url is None:
            url = str(_endpoint(self._base, wire.path))
            if len(self._urls) < _REMEMBERED_PATHS:  # a look-up's path holds its key
                self._urls[wire.path] = url
        if wire.params:
            url = str(httpx.URL(url, params=wire.params))
        return HttpCall(wire.method, url, {**self._headers, **wire.headers}, wire.body)

    async def send(self, mail: OutgoingMail | PreparedMail) -> CallResult:
        """POST the mail under its dedupe key; a reply or a transport failure, never raises
        for network or HTTP problems (``InvalidSendError`` from :meth:`prepare`)."""
        prepared = mail if isinstance(mail, PreparedMail) else self.prepare(mail)
        call = prepared.call
        self._refresh_key()
        if prepared.key_generation != self._key_generation:  # prepared under an earlier key
            call = replace(call, headers={**call.headers, **self._auth})
        trace = tracing.current()
        if trace is not None:  # the mail's trace, continued at the provider (harmless if not)
            carried = {"traceparent": trace.traceparent}
            if trace.tracestate:
                carried["tracestate"] = trace.tracestate
            call = replace(call, headers={**call.headers, **carried})
        try:
            async with asyncio.timeout(self._request_timeout):
                response = await self._exchange.exchange(call)
        except TimeoutError:
            return TransportFailure(True, self._no_reply())
        except _NOT_SENT as exc:
            return TransportFailure(False, self._describe(exc))
        except httpx.HTTPError as exc:
            return TransportFailure(True, self._describe(exc))
        reply = self._dialect.reply(response.status, response.headers, response.body, self._clock())
        return replace(reply, error_excerpt=self._scrub(reply.error_excerpt))

    async def lookup(self, dedupe_key: str) -> LookupResult:
        """Ask whether a mail was accepted under ``dedupe_key``; never raises for network
        or HTTP problems (a provider without a look-up: failed)."""
        if not self.capability.look_up:
            return LookupResult(None, True, "no look-up at this provider")
        self._refresh_key()
        call = self._call(self._dialect.lookup_request(dedupe_key))
        try:
            async with asyncio.timeout(self._request_timeout):
                response = await self._exchange.exchange(call)
        except TimeoutError:
            return LookupResult(None, True, self._no_reply())
        except httpx.HTTPError as exc:
            return LookupResult(None, True, self._describe(exc))
        found = self._dialect.lookup_reply(dedupe_key, response.status, response.body)
        return replace(found, detail=self._scrub(found.detail))

    async def aclose(self) -> None:
        """Close the connections (and the transport); the provider is unusable afterwards."""
        await self._exchange.aclose()

    def _no_reply(self) -> str:
        return f"no reply within {self._request_timeout:g}s"

    def _describe(self, exc: BaseException) -> str:
        text = str(exc)
        return self._scrub(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)

    def _scrub(self, text: str) -> str:
        for key in (self._api_key, *self._earlier_keys):
            if key:
                text = text.replace(key, "***")
        return clip_reason(text)


_MAX_MESSAGE_ID_CHARS = 512


def message_id_of(body: bytes, field: str = "id") -> str | None:
    """The ``field`` of a ``{"id": "<non-empty str>"}`` body, else None. An id with control
    characters (NUL cannot even be stored) or of more than 512 characters is not an id."""
    try:
        doc = json.loads(body)
    except ValueError:  # also UnicodeDecodeError
        return None
    if not isinstance(doc, dict):
        return None
    return valid_id(doc.get(field))


def _field(body: bytes, name: str) -> Any:
    """The ``name`` field of a JSON object body, or None."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get(name) if isinstance(doc, dict) else None


def valid_id(message_id: Any) -> str | None:
    """``message_id`` if it is a usable provider id (see :func:`message_id_of`), else None."""
    if (
        isinstance(message_id, str)
        and message_id.strip()
        and message_id.isprintable()
        and len(message_id) <= _MAX_MESSAGE_ID_CHARS
    ):
        return message_id
    return None


def _endpoint(base: httpx.URL, path: str) -> httpx.URL:
    """``path`` under the base URL's own path, as httpx's ``base_url`` would place it."""
    return base.copy_with(raw_path=base.raw_path.rstrip(b"/") + b"/" + path.encode())


def _is_http_url(text: str) -> bool:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL:
        return False
    return url.scheme in ("http", "https") and bool(url.host)
