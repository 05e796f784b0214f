"""The HTTP provider adapter: CONTRACT.md section 5 spoken over httpx, turned into values.

The only module of the delivery path that imports httpx. :meth:`HttpProvider.send` returns
a :data:`~consumer.core.outcome.CallResult` and :meth:`HttpProvider.lookup` a
:class:`LookupResult`; neither raises for a network or HTTP problem:

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

httpx's read timeout is per chunk, so every call is also bounded as a whole by
``request_timeout``; keep ``connect_timeout`` below it, or a slow connect counts as sent.
The API key travels only in the ``Authorization`` header and is masked in every detail.

By default the calls go through :class:`~consumer.aiohttp_transport.AiohttpTransport`:
httpx's own pool reaches about 600 sends/s at 64 in flight against a 50 ms provider, the
aiohttp transport about 1,150 (see the module docstring there). Requests go straight to
the transport, not through ``httpx.AsyncClient``: the API needs no cookies, redirects or
auth flows, and skipping them saved a sixth of the consumer's CPU per mail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from consumer.aiohttp_transport import AiohttpTransport
from consumer.core.capability import Capability, IdempotencyKey
from consumer.core.outcome import (
    CallResult,
    ProviderReply,
    TransportFailure,
    clip_reason,
    parse_retry_after,
)
from mailbus.errors import ConfigError, InvalidSendError
from mailbus_client.send_request import mail_headers

__all__ = ["HttpProvider", "LookupResult", "OutgoingMail", "PreparedMail"]

_NOT_SENT: tuple[type[httpx.HTTPError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    httpx.UnsupportedProtocol,
)
_EXCERPT_BYTES = 16_384  # scrubbed whole, then clipped: a cut cannot leak part of a key


@dataclass(frozen=True)
class OutgoingMail:
    """What one send carries to the provider."""

    dedupe_key: str
    to_address: str
    template: str
    variables: Mapping[str, Any]


@dataclass(frozen=True)
class PreparedMail:
    """A mail encoded into its request: whatever could not be encoded failed already."""

    dedupe_key: str
    request: httpx.Request


@dataclass(frozen=True)
class LookupResult:
    """``message_id`` if the provider accepted the key; ``failed`` if the look-up said
    nothing (transport error, 5xx, 429, a malformed 200), ``detail`` saying why."""

    message_id: str | None
    failed: bool
    detail: str = ""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HttpProvider:
    """Sends and looks up mails at ``base_url`` with at most ``max_connections`` open."""

    # CONTRACT.md section 5: the same key always gets the same id, and a look-up by key
    capability = Capability(
        IdempotencyKey("Idempotency-Key", None), look_up=True, source="CONTRACT.md section 5"
    )

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
        self._request_timeout = request_timeout
        self._clock = clock
        self._send_url = _endpoint(url, "v1/send")
        self._lookup_url = _endpoint(url, "v1/messages")
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            "User-Agent": "mailbus",
        }
        self._extensions = {
            "timeout": {
                "connect": connect_timeout,
                "read": request_timeout,
                "write": request_timeout,
                "pool": connect_timeout,  # waiting for a free connection: nothing sent yet
            }
        }
        self._transport = transport if transport is not None else AiohttpTransport(max_connections)

    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        """Encode ``mail`` into its request, before any row is claimed for it; raises
        :class:`InvalidSendError` naming the field that cannot travel (a dedupe key that is
        not printable ASCII cannot be an HTTP header; a number JSON cannot carry, such as
        ``1e400`` stored in jsonb, cannot be a body; a ``headers`` variable that is not an
        object of valid names to values without CR/LF). That variable is also sent as the
        body's top-level ``"headers"`` field, the mail headers the provider adds."""
        key = mail.dedupe_key
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
        try:
            body = json.dumps(
                document,
                ensure_ascii=False,
                allow_nan=False,
            ).encode()
        except (TypeError, ValueError) as exc:
            raise InvalidSendError(
                "payload_json", f"not JSON the provider can read: {exc}"
            ) from None
        request = httpx.Request(
            "POST",
            self._send_url,
            content=body,
            headers={
                **self._headers,
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
            extensions=self._extensions,
        )
        return PreparedMail(key, request)

    async def send(self, mail: OutgoingMail | PreparedMail) -> CallResult:
        """POST the mail under its dedupe key; a reply or a transport failure, never raises
        for network or HTTP problems (``InvalidSendError`` from :meth:`prepare`)."""
        request = (mail if isinstance(mail, PreparedMail) else self.prepare(mail)).request
        try:
            async with asyncio.timeout(self._request_timeout):
                response = await self._exchange(request)
        except TimeoutError:
            return TransportFailure(True, self._no_reply())
        except _NOT_SENT as exc:
            return TransportFailure(False, self._describe(exc))
        except httpx.HTTPError as exc:
            return TransportFailure(True, self._describe(exc))
        code = response.status_code
        retry_after = parse_retry_after(response.headers.get("Retry-After"), self._clock())
        if 200 <= code <= 299:
            return ProviderReply(code, _message_id(response), retry_after)
        scope = response.headers.get("X-Throttle-Scope", "").strip().lower()
        return ProviderReply(
            code, None, retry_after, self._excerpt(response), scope == "recipient-domain"
        )

    async def lookup(self, dedupe_key: str) -> LookupResult:
        """Ask whether a mail was accepted under ``dedupe_key``; never raises for network
        or HTTP problems."""
        request = httpx.Request(
            "GET",
            self._lookup_url,
            params={"idempotency_key": dedupe_key},
            headers=self._headers,
            extensions=self._extensions,
        )
        try:
            async with asyncio.timeout(self._request_timeout):
                response = await self._exchange(request)
        except TimeoutError:
            return LookupResult(None, True, self._no_reply())
        except httpx.HTTPError as exc:
            return LookupResult(None, True, self._describe(exc))
        code = response.status_code
        if code == 404:
            return LookupResult(None, False)
        if code == 200:
            message_id = _message_id(response)
            if message_id is not None:
                return LookupResult(message_id, False)
            return LookupResult(None, True, "http 200 without a valid id")
        excerpt = self._excerpt(response)
        return LookupResult(
            None, True, clip_reason(f"http {code}: {excerpt}" if excerpt else f"http {code}")
        )

    async def aclose(self) -> None:
        """Close the connections (and the transport); the provider is unusable afterwards."""
        await self._transport.aclose()

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        """One request, straight to the transport; the response with its body read."""
        response = await self._transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    def _no_reply(self) -> str:
        return f"no reply within {self._request_timeout:g}s"

    def _describe(self, exc: BaseException) -> str:
        text = str(exc)
        return self._scrub(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)

    def _excerpt(self, response: httpx.Response) -> str:
        return self._scrub(response.content[:_EXCERPT_BYTES].decode("utf-8", "replace"))

    def _scrub(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return clip_reason(text)


_MAX_MESSAGE_ID_CHARS = 512


def _message_id(response: httpx.Response) -> str | None:
    """The ``id`` of a ``{"id": "<non-empty str>"}`` body, else None. An id with control
    characters (NUL cannot even be stored) or of more than 512 characters is not an id."""
    try:
        doc = json.loads(response.content)
    except ValueError:  # also UnicodeDecodeError
        return None
    if not isinstance(doc, dict):
        return None
    message_id = doc.get("id")
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
