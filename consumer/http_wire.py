"""One HTTP exchange of the provider adapter, as plain values: :class:`HttpCall` out,
:class:`HttpReply` back, through an :class:`Exchange`.

The delivery path builds no ``httpx.Request`` or ``httpx.Response`` per mail: the default
exchange (:class:`~mailbus.consumer.aiohttp_transport.AiohttpTransport`) hands the call to
aiohttp as it is. A failure is still raised as the httpx exception that httpx's own
transport would raise (``ConnectError``, ``ReadTimeout``, ...), so the provider classifies it
in one way whichever exchange carried the call. :class:`HttpxExchange` carries calls through
any ``httpx.AsyncBaseTransport`` instead (``httpx.MockTransport`` in tests, httpx's own pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

__all__ = ["Exchange", "HttpCall", "HttpReply", "HttpxExchange", "Timeouts"]


@dataclass(frozen=True)
class HttpCall:
    """A request as it goes on the wire: an absolute URL (its query included), its headers
    and body."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None


@dataclass(frozen=True)
class HttpReply:
    """A response with its body read; ``headers`` look names up case-insensitively."""

    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Timeouts:
    """``connect``: opening a connection; ``read``: between two chunks of the reply (and for
    writing the request); ``pool``: waiting for a free connection, nothing sent yet."""

    connect: float
    read: float
    pool: float


class Exchange(Protocol):
    """Carries one call and returns its reply; a failure raises an ``httpx.TransportError``."""

    async def exchange(self, call: HttpCall) -> HttpReply: ...

    async def aclose(self) -> None: ...


class HttpxExchange:
    """Calls through an httpx transport, under ``timeouts``."""

    def __init__(self, transport: httpx.AsyncBaseTransport, timeouts: Timeouts) -> None:
        self._transport = transport
        self._extensions = {
            "timeout": {
                "connect": timeouts.connect,
                "read": timeouts.read,
                "write": timeouts.read,
                "pool": timeouts.pool,
            }
        }

    async def exchange(self, call: HttpCall) -> HttpReply:
        request = httpx.Request(
            call.method,
            call.url,
            headers=call.headers,
            content=call.body,
            extensions=self._extensions,
        )
        response = await self._transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return HttpReply(response.status_code, response.headers, response.content)

    async def aclose(self) -> None:
        await self._transport.aclose()
