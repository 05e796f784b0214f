"""The HTTP provider adapter over ``httpx.MockTransport``: requests, replies, failures.

No network: every response or exception comes from a handler. The last tests feed the
aiohttp transport's translated errors through the same path, so a failure is classified
identically whichever transport carries the call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import pytest
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from mailbus.consumer.aiohttp_transport import translate_error
from mailbus.consumer.core.outcome import CallResult, ProviderReply, TransportFailure
from mailbus.consumer.provider import HttpProvider, LookupResult, OutgoingMail
from mailbus.kernel.errors import ConfigError, InvalidSendError

API_KEY = "sk_live_S3CRET-KEY-42"
BASE_URL = "https://mail.example.test/api"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MAIL = OutgoingMail("order-7:confirmation", "ana@example.com", "order_confirmation", {"n": 7})

Handler = (
    Callable[[httpx.Request], httpx.Response]
    | Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]
)


def call(handler: Handler, fn: str = "send", *, request_timeout: float = 5.0) -> Any:
    """Run one ``send(MAIL)`` or ``lookup(MAIL.key)`` against ``handler``."""

    async def main() -> Any:
        provider = HttpProvider(
            BASE_URL,
            API_KEY,
            connect_timeout=1.0,
            request_timeout=request_timeout,
            max_connections=4,
            transport=httpx.MockTransport(handler),
            clock=lambda: NOW,
        )
        try:
            if fn == "send":
                return await provider.send(MAIL)
            return await provider.lookup(MAIL.key)
        finally:
            await provider.aclose()

    return asyncio.run(main())


def reply(status: int, body: bytes | dict[str, Any] = b"", **headers: str) -> Handler:
    content = json.dumps(body).encode() if isinstance(body, dict) else body
    return lambda request: httpx.Response(status, content=content, headers=headers)


def raising(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def test_send_request_is_as_specified() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "msg_1"})

    assert call(handler) == ProviderReply(200, "msg_1", None, "")
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == "https://mail.example.test/api/v1/send"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["Idempotency-Key"] == MAIL.key
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.content) == {
        "to": "ana@example.com",
        "template": "order_confirmation",
        "variables": {"n": 7},
    }


def test_lookup_request_is_as_specified() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404)

    assert call(handler, "lookup") == LookupResult(None, False)
    (request,) = seen
    assert request.method == "GET"
    assert request.url.path == "/api/v1/messages"
    assert request.url.params["idempotency_key"] == MAIL.key
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"


@pytest.mark.parametrize("status", [200, 201, 202])
def test_2xx_with_id_is_a_reply_with_message_id(status: int) -> None:
    assert call(reply(status, {"id": "msg_abc", "extra": 1})) == ProviderReply(status, "msg_abc")


@pytest.mark.parametrize("status", [302, 400, 401, 404, 408, 409, 422, 429, 500, 501, 503, 504])
def test_non_2xx_is_a_reply_without_id_and_with_excerpt(status: int) -> None:
    body = {"id": "msg_not_for_you", "error": "nope"}
    result = call(reply(status, body))
    assert isinstance(result, ProviderReply)
    assert (result.status_code, result.message_id) == (status, None)
    assert '"error": "nope"' in result.error_excerpt


def test_error_excerpt_is_short_and_single_line() -> None:
    result = call(reply(503, b"line one\nline two\r\n" + b"x" * 5000))
    assert isinstance(result, ProviderReply)
    assert result.error_excerpt.startswith("line one line two x")
    assert len(result.error_excerpt) <= 200 and "\n" not in result.error_excerpt


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("Thu, 01 Jan 2026 00:00:30 GMT", 30.0),
        ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0),
        ("soon", None),
        ("-5", None),
    ],
)
def test_retry_after_seconds_and_http_date(header: str, expected: float | None) -> None:
    result = call(reply(429, {"error": "rate_limited"}, **{"Retry-After": header}))
    assert isinstance(result, ProviderReply)
    assert result.status_code == 429 and result.retry_after_s == expected


def test_no_retry_after_is_none() -> None:
    result = call(reply(503))
    assert result == ProviderReply(503, None, None, "")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"id": "msg_1"',
        b"\xff\xfe\x00",
        b"[]",
        b'"msg_1"',
        b"{}",
        b'{"id": ""}',
        b'{"id": "   "}',
        b'{"id": 5}',
        b'{"id": null}',
        b'{"message_id": "msg_1"}',
        b'{"id": "msg_\\u0000nul"}',  # PostgreSQL text cannot hold NUL
        b'{"id": "msg_1\\r\\nX-Injected: 1"}',
        b'{"id": "' + b"m" * 513 + b'"}',
    ],
)
def test_malformed_2xx_has_no_message_id(body: bytes) -> None:
    assert call(reply(200, body)) == ProviderReply(200, None)


NOT_SENT = [
    httpx.ConnectError("All connection attempts failed"),
    httpx.ConnectTimeout("timed out"),
    httpx.PoolTimeout("no free connection"),
    httpx.ProxyError("proxy said no"),
    httpx.UnsupportedProtocol("ftp"),
]
SENT = [
    httpx.ReadTimeout("timed out"),
    httpx.WriteTimeout("timed out"),
    httpx.ReadError("connection reset"),
    httpx.WriteError("broken pipe"),
    httpx.RemoteProtocolError("Server disconnected without sending a response."),
    httpx.LocalProtocolError("odd"),
    httpx.DecodingError("bad gzip"),
    httpx.NetworkError("something"),
    httpx.TransportError("something else"),
]


@pytest.mark.parametrize(
    ("exc", "sent"),
    [(e, False) for e in NOT_SENT] + [(e, True) for e in SENT],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_exceptions_become_transport_failures(exc: Exception, sent: bool) -> None:
    result = call(raising(exc))
    assert isinstance(result, TransportFailure)
    assert result.request_sent is sent
    assert result.detail.startswith(type(exc).__name__)


def test_whole_call_deadline_counts_as_sent() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json={"id": "too_late"})

    started = time.monotonic()
    result = call(slow, request_timeout=0.2)
    assert time.monotonic() - started < 5
    assert result == TransportFailure(True, "no reply within 0.2s")
    assert call(slow, "lookup", request_timeout=0.2) == LookupResult(
        None, True, "no reply within 0.2s"
    )


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (reply(200, {"id": "msg_9"}), LookupResult("msg_9", False)),
        (reply(404, {"error": "not_found"}), LookupResult(None, False)),
        (reply(200, b"{oops"), LookupResult(None, True, "http 200 without a valid id")),
        (reply(200, {"id": ""}), LookupResult(None, True, "http 200 without a valid id")),
        (reply(500, b"boom"), LookupResult(None, True, "http 500: boom")),
        (reply(503), LookupResult(None, True, "http 503")),
        (reply(429, b"slow down"), LookupResult(None, True, "http 429: slow down")),
        (reply(401, b"who"), LookupResult(None, True, "http 401: who")),
        (raising(httpx.ConnectError("refused")), LookupResult(None, True, "ConnectError: refused")),
        (raising(httpx.ReadTimeout("slow")), LookupResult(None, True, "ReadTimeout: slow")),
    ],
)
def test_lookup(handler: Handler, expected: LookupResult) -> None:
    assert call(handler, "lookup") == expected


@pytest.mark.parametrize("fn", ["send", "lookup"])
@pytest.mark.parametrize(
    "handler",
    [
        reply(500, f"bad key {API_KEY}".encode()),
        reply(401, f"Authorization: Bearer {API_KEY}".encode()),
        reply(400, b"x" * 195 + API_KEY.encode()),
        raising(httpx.ConnectError(f"cannot connect with {API_KEY}")),
        raising(httpx.ReadError(f"Bearer {API_KEY} reset")),
        raising(httpx.ProxyError(f"{API_KEY}{API_KEY}")),
    ],
)
def test_api_key_never_appears(handler: Handler, fn: str) -> None:
    result = call(handler, fn)
    text = repr(result)
    assert API_KEY not in text
    assert API_KEY[:8] not in text  # not even a clipped prefix


@pytest.mark.parametrize(
    ("mail", "field"),
    [
        (OutgoingMail("k", "ana@example.com", "t", {"when": datetime(2026, 1, 1)}), "payload_json"),
        (OutgoingMail("k", "ana@example.com", "t", {"n": float("inf")}), "payload_json"),
        (OutgoingMail("ключ-1", "ana@example.com", "t", {}), "dedupe_key"),
        (OutgoingMail("k\r\nX-Evil: 1", "ana@example.com", "t", {}), "dedupe_key"),
    ],
)
def test_a_mail_that_cannot_be_encoded_is_refused_before_any_request(
    mail: OutgoingMail, field: str
) -> None:
    requests: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"id": "m"})

    async def main() -> CallResult:
        provider = HttpProvider(
            BASE_URL, API_KEY, 1.0, 5.0, 1, transport=httpx.MockTransport(record)
        )
        try:
            return await provider.send(mail)
        finally:
            await provider.aclose()

    with pytest.raises(InvalidSendError) as refused:
        asyncio.run(main())
    assert refused.value.field == field
    assert requests == []


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"base_url": "ftp://x"}, "MAILBUS_PROVIDER_URL"),
        ({"base_url": "not a url"}, "MAILBUS_PROVIDER_URL"),
        ({"connect_timeout": 0}, "MAILBUS_CONNECT_TIMEOUT"),
        ({"request_timeout": -1}, "MAILBUS_REQUEST_TIMEOUT"),
        ({"max_connections": 0}, "max_connections"),
        ({"api_key": "two words"}, "MAILBUS_PROVIDER_API_KEY"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, Any], setting: str) -> None:
    options: dict[str, Any] = {
        "base_url": BASE_URL,
        "api_key": API_KEY,
        "connect_timeout": 1.0,
        "request_timeout": 5.0,
        "max_connections": 1,
    } | kwargs
    with pytest.raises(ConfigError) as caught:
        HttpProvider(**options, transport=httpx.MockTransport(reply(200)))
    assert caught.value.setting == setting


# The aiohttp transport's translation, through the provider: same classification.

_KEY = SimpleNamespace(host="mail.example.test", port=443, is_ssl=True, ssl=True)
_INFO = aiohttp.RequestInfo(
    URL("https://mail.example.test/v1/send"), "POST", CIMultiDictProxy(CIMultiDict())
)


def _connector(cls: type[aiohttp.ClientConnectorError], errno: int) -> Exception:
    key: Any = _KEY  # aiohttp reads only host/port/ssl of its private ConnectionKey
    return cls(key, OSError(errno, "cannot connect"))


AIOHTTP_ERRORS: list[tuple[Exception, type[httpx.HTTPError], bool]] = [
    (_connector(aiohttp.ClientConnectorError, 111), httpx.ConnectError, False),
    (_connector(aiohttp.ClientConnectorDNSError, -2), httpx.ConnectError, False),
    (_connector(aiohttp.ClientProxyConnectionError, 111), httpx.ProxyError, False),
    (aiohttp.ClientHttpProxyError(_INFO, (), status=407), httpx.ProxyError, False),
    (aiohttp.ServerFingerprintMismatch(b"a", b"b", "h", 443), httpx.ConnectError, False),
    (aiohttp.ConnectionTimeoutError("connect timed out"), httpx.ConnectTimeout, False),
    (aiohttp.NonHttpUrlClientError("ftp://x"), httpx.UnsupportedProtocol, False),
    (aiohttp.InvalidUrlClientError("http://"), httpx.UnsupportedProtocol, False),
    (aiohttp.SocketTimeoutError("read timed out"), httpx.ReadTimeout, True),
    (aiohttp.ServerTimeoutError("timed out"), httpx.ReadTimeout, True),
    (TimeoutError(), httpx.ReadTimeout, True),
    (aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError, True),
    (aiohttp.ClientPayloadError("incomplete body"), httpx.RemoteProtocolError, True),
    (aiohttp.ClientResponseError(_INFO, (), status=400), httpx.RemoteProtocolError, True),
    (aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError, True),
    (aiohttp.ClientConnectionResetError("reset"), httpx.ReadError, True),
    (aiohttp.ClientConnectionError("closed"), httpx.ReadError, True),
    (aiohttp.ClientError("odd"), httpx.ReadError, True),
]


@pytest.mark.parametrize(
    ("error", "expected", "sent"), AIOHTTP_ERRORS, ids=lambda v: type(v).__name__
)
def test_aiohttp_errors_classify_like_httpx(
    error: Exception, expected: type[httpx.HTTPError], sent: bool
) -> None:
    translated = translate_error(error)
    assert type(translated) is expected
    assert str(translated).startswith(f"{type(error).__name__}: ")
    result = call(raising(translated))
    assert isinstance(result, TransportFailure) and result.request_sent is sent


def test_non_aiohttp_errors_are_not_translated() -> None:
    assert translate_error(ValueError("x")) is None
