"""The provider's default :class:`~mailbus.consumer.http_wire.Exchange`: one
``aiohttp.ClientSession``.

httpx's own pool (httpcore) tops out at a few hundred requests/s at 64 in flight with the
client at 100% CPU (encode/httpx#3215); aiohttp's connector is several times faster. A call
goes to aiohttp as the values it is (no ``httpx.Request`` or ``httpx.Response`` is built),
and aiohttp's errors become the httpx exceptions httpx's own transport would raise, so the
provider classifies a failure the same way whichever exchange carries the call:

==========================================  ===========================  ============
aiohttp                                     httpx                        request sent
==========================================  ===========================  ============
ConnectionTimeoutError (connect or pool)    ConnectTimeout               no
ClientProxyConnectionError, HttpProxyError  ProxyError                   no
ClientConnectorError (refused, DNS, TLS)    ConnectError                 no
ServerFingerprintMismatch                   ConnectError                 no
InvalidURL, NonHttpUrlClientError           UnsupportedProtocol          no
SocketTimeoutError, other timeouts          ReadTimeout                  maybe
ServerDisconnectedError, ClientPayload-     RemoteProtocolError          maybe
Error, ClientResponseError (bad reply)
ClientOSError, other connection errors      ReadError                    maybe
==========================================  ===========================  ============

Of the :class:`~mailbus.consumer.http_wire.Timeouts`, ``connect`` becomes ``sock_connect``,
``read`` becomes ``sock_read``, ``pool`` bounds waiting for a connection plus connecting.
The body is read in full here (replies of an email API are small), so the connection is
back in the pool before the reply is returned.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import httpx

from mailbus.consumer.http_wire import HttpCall, HttpReply, Timeouts

__all__ = ["AiohttpTransport", "translate_error"]

_ERROR_MAP: tuple[tuple[type[BaseException], type[httpx.TransportError]], ...] = (
    # Most specific first: several aiohttp errors have more than one of these as bases.
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientProxyConnectionError, httpx.ProxyError),
    (aiohttp.ClientHttpProxyError, httpx.ProxyError),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerFingerprintMismatch, httpx.ConnectError),
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol),
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError),
    (aiohttp.ClientOSError, httpx.ReadError),
    (aiohttp.ClientConnectionError, httpx.ReadError),
    (TimeoutError, httpx.ReadTimeout),
    (aiohttp.ClientError, httpx.ReadError),
)


def translate_error(exc: BaseException) -> httpx.TransportError | None:
    """The httpx exception standing for an aiohttp error, or None if it is not one."""
    for source, target in _ERROR_MAP:
        if isinstance(exc, source):
            message = str(exc) or type(exc).__name__
            return target(f"{type(exc).__name__}: {message}")
    return None


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (aiohttp.ClientError, TimeoutError) as exc:
        mapped = translate_error(exc)
        if mapped is None:  # pragma: no cover - the map ends with ClientError
            raise
        raise mapped from exc


class AiohttpTransport:
    """HTTP/1.1 over one aiohttp session of at most ``max_connections`` connections.

    The session is created on first use, on the running loop (aiohttp binds a session to
    its loop); ``aclose()`` closes it. One transport serves one event loop.
    """

    def __init__(
        self, max_connections: int, timeouts: Timeouts, *, keepalive_s: float = 15.0
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.pool,
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        )
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the transport is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=self._keepalive_s
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def exchange(self, call: HttpCall) -> HttpReply:
        session = self._get_session()
        with _translated():
            async with session.request(
                call.method,
                call.url,
                headers=call.headers,
                data=call.body,
                allow_redirects=False,
                compress=False,
            ) as reply:
                return HttpReply(reply.status, reply.headers, await reply.read())

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()
