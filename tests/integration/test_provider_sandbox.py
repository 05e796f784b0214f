"""The HTTP provider against the real sandbox over loopback: every fault, both transports.

``default`` is what ``HttpProvider`` uses when given no transport (the aiohttp one);
``httpx`` is httpx's own pool, run through the same cases to show that a failure is
classified the same whichever transport carries it. No stack services needed.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest

from mailbus.consumer.core.outcome import ProviderReply, TransportFailure
from mailbus.consumer.provider import HttpProvider, LookupResult, OutgoingMail
from mailbus.sandbox.app import SandboxState
from mailbus.sandbox.faults import build_plan
from mailbus.sandbox.server import ThreadedSandbox, start_in_thread

API_KEY = "integration-key-0123456789"
MAIL = OutgoingMail("order-1:confirmation", "ana@example.com", "order_confirmation", {"n": 1})

_T = TypeVar("_T")
Scenario = Callable[[HttpProvider], Awaitable[_T]]


@pytest.fixture
def sandbox() -> Iterator[ThreadedSandbox]:
    with start_in_thread(api_key=API_KEY, seed=7) as server:
        yield server


@pytest.fixture(params=["default", "httpx"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(
    url: str,
    transport: str,
    scenario: Scenario[_T],
    *,
    api_key: str = API_KEY,
    connect_timeout: float = 1.0,
    request_timeout: float = 5.0,
) -> _T:
    async def main() -> _T:
        provider = HttpProvider(
            url,
            api_key,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            max_connections=64,
            transport=httpx.AsyncHTTPTransport() if transport == "httpx" else None,
        )
        try:
            return await scenario(provider)
        finally:
            await provider.aclose()

    return asyncio.run(main())


def send_then_lookup(mail: OutgoingMail = MAIL) -> Scenario[tuple[Any, LookupResult]]:
    async def scenario(provider: HttpProvider) -> tuple[Any, LookupResult]:
        return await provider.send(mail), await provider.lookup(mail.key)

    return scenario


def set_faults(sandbox: ThreadedSandbox, *specs: str) -> None:
    plan = build_plan(specs)

    def apply(state: SandboxState) -> None:
        state.plan = plan

    sandbox.call(apply)


def ledger_entry(sandbox: ThreadedSandbox, key: str) -> dict[str, Any]:
    entry: dict[str, Any] = sandbox.call(lambda state: state.ledger.snapshot())["keys"][key]
    return entry


def test_accepted_and_found(sandbox: ThreadedSandbox, transport: str) -> None:
    sent, found = run(sandbox.url, transport, send_then_lookup())
    assert isinstance(sent, ProviderReply) and sent.status_code == 200
    assert sent.message_id == ledger_entry(sandbox, MAIL.key)["id"]
    assert found == LookupResult(sent.message_id, False)


def test_drop_before_accept_is_sent_and_not_found(sandbox: ThreadedSandbox, transport: str) -> None:
    set_faults(sandbox, "drop_before_accept:next=1")

    async def scenario(provider: HttpProvider) -> tuple[Any, LookupResult, Any]:
        failure = await provider.send(MAIL)
        return failure, await provider.lookup(MAIL.key), await provider.send(MAIL)

    failure, found, retried = run(sandbox.url, transport, scenario)
    assert isinstance(failure, TransportFailure) and failure.request_sent is True
    assert found == LookupResult(None, False)
    assert isinstance(retried, ProviderReply) and retried.message_id  # the pool recovers
    assert ledger_entry(sandbox, MAIL.key)["accepted"] == 1


def test_drop_after_accept_is_sent_and_found(sandbox: ThreadedSandbox, transport: str) -> None:
    set_faults(sandbox, "drop_after_accept:next=1")
    failure, found = run(sandbox.url, transport, send_then_lookup())
    assert isinstance(failure, TransportFailure) and failure.request_sent is True
    assert found == LookupResult(ledger_entry(sandbox, MAIL.key)["id"], False)


def test_hang_after_accept_times_out_as_sent(sandbox: ThreadedSandbox, transport: str) -> None:
    set_faults(sandbox, "hang_after_accept:next=1:hang_seconds=30")
    started = time.monotonic()
    failure, found = run(sandbox.url, transport, send_then_lookup(), request_timeout=1.0)
    assert time.monotonic() - started < 4
    assert isinstance(failure, TransportFailure) and failure.request_sent is True
    assert found == LookupResult(ledger_entry(sandbox, MAIL.key)["id"], False)


def test_malformed_reply_has_no_message_id(sandbox: ThreadedSandbox, transport: str) -> None:
    set_faults(sandbox, "malformed:next=1")
    sent, found = run(sandbox.url, transport, send_then_lookup())
    assert sent == ProviderReply(200, None)
    assert found.message_id is not None and not found.failed


def test_429_carries_retry_after(sandbox: ThreadedSandbox, transport: str) -> None:
    set_faults(sandbox, "429:share=1:retry_after=3")
    sent, found = run(sandbox.url, transport, send_then_lookup())
    assert isinstance(sent, ProviderReply)
    assert (sent.status_code, sent.message_id, sent.retry_after_s) == (429, None, 3.0)
    assert "rate_limited" in sent.error_excerpt
    assert found == LookupResult(None, False)


@pytest.mark.parametrize("status", [503, 422])
def test_error_statuses(sandbox: ThreadedSandbox, transport: str, status: int) -> None:
    set_faults(sandbox, f"{status}:next=1")
    sent, _ = run(sandbox.url, transport, send_then_lookup())
    assert isinstance(sent, ProviderReply) and sent.status_code == status
    assert sent.message_id is None and sent.error_excerpt


def test_connection_refused_is_not_sent(transport: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed now: nothing listens on it.
    failure, found = run(f"http://127.0.0.1:{port}", transport, send_then_lookup())
    assert isinstance(failure, TransportFailure) and failure.request_sent is False
    assert failure.detail.startswith("ConnectError")
    assert found.failed and found.message_id is None


def test_wrong_api_key_is_401(sandbox: ThreadedSandbox, transport: str) -> None:
    wrong = "wrong-key-abcdef"
    sent, found = run(sandbox.url, transport, send_then_lookup(), api_key=wrong)
    assert isinstance(sent, ProviderReply) and sent.status_code == 401
    assert sent.message_id is None and "unauthorized" in sent.error_excerpt
    assert found.failed and found.detail.startswith("http 401")
    assert wrong not in repr((sent, found))


def test_concurrent_sends_are_each_accepted_once(sandbox: ThreadedSandbox, transport: str) -> None:
    mails = [OutgoingMail(f"k-{i % 100}", "ana@example.com", "t", {"i": i}) for i in range(200)]

    async def scenario(provider: HttpProvider) -> list[Any]:
        return list(await asyncio.gather(*(provider.send(m) for m in mails)))

    # 200 sends at once queue for the pool (64 or httpx's 100 connections); waiting for a
    # connection counts against the connect timeout, which a loaded CI machine overran at 1 s.
    results = run(sandbox.url, transport, scenario, connect_timeout=30.0)
    ids: dict[str, set[str | None]] = {}
    for mail, result in zip(mails, results, strict=True):
        assert isinstance(result, ProviderReply) and result.status_code == 200
        ids.setdefault(mail.key, set()).add(result.message_id)
    assert all(len(found) == 1 and None not in found for found in ids.values())
    totals = sandbox.call(lambda state: state.ledger.snapshot())["totals"]
    assert totals["accepted"] == 100


def test_a_429_for_one_recipient_domain_says_so_and_spares_the_others(
    sandbox: ThreadedSandbox, transport: str
) -> None:
    set_faults(sandbox, "429:domain=slow.example:retry_after=2")
    slow = OutgoingMail("k-slow", "ana@Slow.Example", "order_confirmation", {})
    fast = OutgoingMail("k-fast", "bo@fast.example", "order_confirmation", {})

    async def scenario(provider: HttpProvider) -> tuple[Any, Any]:
        return await provider.send(slow), await provider.send(fast)

    throttled, accepted = run(sandbox.url, transport, scenario)
    assert throttled == ProviderReply(429, None, 2.0, throttled.error_excerpt, True)
    assert isinstance(accepted, ProviderReply) and accepted.status_code == 200
    log = sandbox.call(lambda state: state.ledger.request_log())
    assert [(r["to"], r["outcome"]) for r in log] == [
        ("ana@Slow.Example", "429"),
        ("bo@fast.example", "accepted"),
    ]


def test_the_default_path_builds_no_httpx_request_or_response(
    sandbox: ThreadedSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per mail, the aiohttp path hands the encoded call to aiohttp as it is: building an
    httpx request and response around each call cost about a tenth of the consumer's CPU
    (docs/benchmarks/speed.md)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an httpx object was built on the delivery path")

    monkeypatch.setattr(httpx.Request, "__init__", refuse)
    monkeypatch.setattr(httpx.Response, "__init__", refuse)
    sent, found = run(sandbox.url, "default", send_then_lookup())
    assert isinstance(sent, ProviderReply) and sent.status_code == 200
    assert found == LookupResult(sent.message_id, False)
