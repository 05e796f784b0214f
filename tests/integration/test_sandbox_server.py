"""The sandbox email API over real HTTP on loopback: contract, idempotency, every fault.

The server runs in-process on its own thread and event loop (port 0); the CLI is also
exercised as a subprocess (``python -m sandbox --port 0``). No stack services needed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mailbus.sandbox.faults import FaultPlan, parse_fault
from mailbus.sandbox.server import ThreadedSandbox, start_in_thread

REPO = Path(__file__).resolve().parents[2]
API_KEY = "test-key"
BODY = {"to": "ana@example.com", "template": "order_confirmation", "variables": {"n": 1}}
MESSAGE_ID = re.compile(r"^msg_[0-9a-f]{32}$")
DROPPED = (httpx.RemoteProtocolError, httpx.ReadError)


@pytest.fixture
def sandbox() -> Iterator[ThreadedSandbox]:
    with start_in_thread(api_key=API_KEY, seed=1) as server:
        yield server


@pytest.fixture
def client(sandbox: ThreadedSandbox) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=sandbox.url, headers=headers, timeout=10) as c:
        yield c


def send(client: httpx.Client, key: str, **kwargs: Any) -> httpx.Response:
    return client.post("/v1/send", json=BODY, headers={"Idempotency-Key": key}, **kwargs)


def lookup(client: httpx.Client, key: str) -> int:
    return client.get("/v1/messages", params={"idempotency_key": key}).status_code


def set_faults(client: httpx.Client, *specs: str, latency_ms: float = 0) -> None:
    doc = {"latency_ms": latency_ms, "faults": [parse_fault(s).to_dict() for s in specs]}
    client.post("/_sandbox/faults", json=doc).raise_for_status()


def ledger(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/_sandbox/ledger")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def key_counts(client: httpx.Client, key: str) -> tuple[int, int]:
    entry = ledger(client)["keys"][key]
    return entry["requests"], entry["accepted"]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_health(client: httpx.Client) -> None:
    assert client.get("/_sandbox/health").json() == {"status": "ok"}


@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {API_KEY}", API_KEY])
def test_wrong_or_missing_key_is_401_and_accepts_nothing(
    sandbox: ThreadedSandbox, auth: str | None
) -> None:
    headers = {"Idempotency-Key": "k-auth"} | ({"Authorization": auth} if auth else {})
    with httpx.Client(base_url=sandbox.url, timeout=10) as anon:
        assert anon.post("/v1/send", json=BODY, headers=headers).status_code == 401
        params = {"idempotency_key": "k-auth"}
        assert anon.get("/v1/messages", params=params, headers=headers).status_code == 401
        doc = anon.get("/_sandbox/ledger").json()
    assert doc["keys"]["k-auth"]["accepted"] == 0
    assert doc["totals"]["outcomes"] == {"unauthorized": 2}


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[1, 2]",
        b'{"template": "t"}',
        b'{"to": "a@b.co"}',
        b'{"to": "a@b.co", "template": "t", "variables": [1]}',
        b'{"to": 5, "template": "t"}',
    ],
)
def test_malformed_body_is_400(client: httpx.Client, content: bytes) -> None:
    response = client.post("/v1/send", content=content, headers={"Idempotency-Key": "k-bad"})
    assert response.status_code == 400
    assert key_counts(client, "k-bad") == (1, 0)


def test_missing_idempotency_key_is_400(client: httpx.Client) -> None:
    assert client.post("/v1/send", json=BODY).status_code == 400
    assert client.get("/v1/messages").status_code == 400
    assert ledger(client)["totals"]["accepted"] == 0


def test_accept_then_idempotent_replay(client: httpx.Client) -> None:
    first = send(client, "order-1-confirmation")
    assert first.status_code == 200
    message_id = first.json()["id"]
    assert MESSAGE_ID.match(message_id)
    again = send(client, "order-1-confirmation")
    assert again.status_code == 200 and again.json() == {"id": message_id}
    other = send(client, "order-2-confirmation").json()["id"]
    assert other != message_id
    entry = ledger(client)["keys"]["order-1-confirmation"]
    assert entry == {
        "requests": 2,
        "accepted": 1,
        "sends": 2,
        "id": message_id,
        "to": BODY["to"],
        "template": BODY["template"],
    }
    outcomes = [r["outcome"] for r in client.get("/_sandbox/requests").json()]
    assert outcomes == ["accepted", "replayed", "accepted"]


def test_lookup(client: httpx.Client) -> None:
    assert lookup(client, "k-look") == 404
    message_id = send(client, "k-look").json()["id"]
    response = client.get("/v1/messages", params={"idempotency_key": "k-look"})
    assert (response.status_code, response.json()) == (
        200,
        {"id": message_id, "idempotency_key": "k-look"},
    )
    assert ledger(client)["totals"]["lookups"] == 2


def test_429_carries_retry_after_and_accepts_nothing(client: httpx.Client) -> None:
    set_faults(client, "429:share=1:retry_after=3")
    response = send(client, "k-429")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3"
    assert lookup(client, "k-429") == 404
    assert key_counts(client, "k-429") == (1, 0)


@pytest.mark.parametrize("status", [503, 422])
def test_error_status_faults(client: httpx.Client, status: int) -> None:
    set_faults(client, f"{status}:next=1")
    assert send(client, "k-err").status_code == status
    assert lookup(client, "k-err") == 404
    assert send(client, "k-err").status_code == 200
    assert key_counts(client, "k-err") == (2, 1)


def test_next_n_counts_down(client: httpx.Client) -> None:
    set_faults(client, "503:next=3")
    statuses = [send(client, "k-next").status_code for _ in range(5)]
    assert statuses == [503, 503, 503, 200, 200]
    assert client.get("/_sandbox/faults").json()["faults"] == [{"kind": "503", "next": 0}]
    assert key_counts(client, "k-next") == (5, 1)


def test_drop_before_accept(client: httpx.Client) -> None:
    set_faults(client, "drop_before_accept:next=1")
    with pytest.raises(DROPPED):
        send(client, "k-drop-before")
    assert lookup(client, "k-drop-before") == 404
    assert key_counts(client, "k-drop-before") == (1, 0)
    assert send(client, "k-drop-before").status_code == 200  # the pool recovers


def test_drop_after_accept(client: httpx.Client) -> None:
    set_faults(client, "drop_after_accept:next=1")
    with pytest.raises(DROPPED):
        send(client, "k-drop-after")
    assert lookup(client, "k-drop-after") == 200
    retried = send(client, "k-drop-after")
    assert retried.json()["id"] == ledger(client)["keys"]["k-drop-after"]["id"]
    assert key_counts(client, "k-drop-after") == (2, 1)


def test_hang_after_accept_times_the_client_out(client: httpx.Client) -> None:
    set_faults(client, "hang_after_accept:next=1")
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        send(client, "k-hang", timeout=httpx.Timeout(10, read=1))
    assert 0.9 <= time.monotonic() - started < 10
    assert lookup(client, "k-hang") == 200
    assert key_counts(client, "k-hang") == (1, 1)
    # The client gave up: the hanging handler notices and stops holding a slot.
    wait_until(lambda: ledger(client)["in_flight"] == 0, 10, "the hang to end")


def test_hang_ends_with_a_close_after_hang_seconds(client: httpx.Client) -> None:
    set_faults(client, "hang_after_accept:next=1:hang_seconds=0.3")
    started = time.monotonic()
    with pytest.raises(DROPPED):
        send(client, "k-hang-short")
    assert 0.25 <= time.monotonic() - started < 10
    assert lookup(client, "k-hang-short") == 200


def test_malformed_body(client: httpx.Client) -> None:
    set_faults(client, "malformed:next=1")
    response = send(client, "k-malformed")
    assert response.status_code == 200
    with pytest.raises(ValueError):
        json.loads(response.content)
    assert lookup(client, "k-malformed") == 200
    assert key_counts(client, "k-malformed") == (1, 1)


def test_latency_applies_to_sends(client: httpx.Client) -> None:
    set_faults(client, latency_ms=200)
    started = time.monotonic()
    assert send(client, "k-slow").status_code == 200
    assert time.monotonic() - started >= 0.19


def test_a_slow_send_abandoned_by_the_client_is_still_accepted(client: httpx.Client) -> None:
    set_faults(client, "slow:next=1:ms=1500")
    with pytest.raises(httpx.ReadTimeout):
        send(client, "k-abandoned", timeout=httpx.Timeout(10, read=0.3))
    assert lookup(client, "k-abandoned") == 404
    wait_until(lambda: lookup(client, "k-abandoned") == 200, 10, "the late acceptance")


async def _concurrent_sends(url: str, keys: list[str]) -> list[httpx.Response]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as c:
        return await asyncio.gather(
            *(c.post("/v1/send", json=BODY, headers={"Idempotency-Key": k}) for k in keys)
        )


def test_max_concurrent_is_observed(sandbox: ThreadedSandbox, client: httpx.Client) -> None:
    set_faults(client, "slow:share=1:ms=400")
    started = time.monotonic()
    responses = asyncio.run(_concurrent_sends(sandbox.url, [f"k-c{i}" for i in range(10)]))
    assert time.monotonic() - started < 3.5  # ten at once, not one after another
    assert [r.status_code for r in responses] == [200] * 10
    doc = ledger(client)
    assert (doc["max_concurrent"], doc["in_flight"]) == (10, 0)
    assert doc["totals"]["accepted"] == 10


def test_concurrent_sends_with_one_key_accept_once(
    sandbox: ThreadedSandbox, client: httpx.Client
) -> None:
    set_faults(client, latency_ms=100)
    responses = asyncio.run(_concurrent_sends(sandbox.url, ["k-same"] * 10))
    assert len({r.json()["id"] for r in responses}) == 1
    entry = ledger(client)["keys"]["k-same"]
    assert (entry["requests"], entry["accepted"], entry["sends"]) == (10, 1, 10)


def test_control_plan_reset_and_request_log(sandbox: ThreadedSandbox, client: httpx.Client) -> None:
    bad = client.post("/_sandbox/faults", json={"faults": [{"kind": "500"}]})
    assert bad.status_code == 400
    doc = {"latency_ms": 5, "faults": [{"kind": "429", "share": 0.2, "retry_after": 3}]}
    assert client.post("/_sandbox/faults", json=doc).json() == {
        "latency_ms": 5.0,
        "faults": [{"kind": "429", "share": 0.2, "retry_after": 3}],
    }
    before = time.time()
    send(client, "k-log")
    log = client.get("/_sandbox/requests").json()
    assert [(r["key"], r["kind"]) for r in log] == [("k-log", "send")]
    assert before - 1 <= log[0]["t"] <= time.time() + 1
    assert client.get("/_sandbox/requests", params={"since": time.time() + 60}).json() == []
    assert sandbox.call(lambda state: state.ledger.sends) == 1
    assert client.post("/_sandbox/reset").json() == {"status": "reset"}
    assert client.get("/_sandbox/faults").json() == FaultPlan().to_dict()
    assert ledger(client)["keys"] == {}
    assert client.get("/_sandbox/requests").json() == []


def test_start_in_thread_reports_a_bind_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            start_in_thread(port=taken.getsockname()[1])


def _run_cli(*args: str) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    env.pop("MAILBUS_PROVIDER_API_KEY", None)
    command = [sys.executable, "-m", "sandbox", *args]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_cli_serves_and_stops_cleanly_on_sigterm() -> None:
    proc = _run_cli("--port", "0", "--fault", "503:next=1", "--seed", "3")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"listening on (http://\S+)", line)
        assert match, line
        headers = {"Authorization": "Bearer sandbox-key", "Idempotency-Key": "k-cli"}
        with httpx.Client(base_url=match.group(1), headers=headers, timeout=10) as c:
            assert c.post("/v1/send", json=BODY).status_code == 503
            assert c.post("/v1/send", json=BODY).status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped" in out


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--fault", "500:share=1"], "--fault"),
        (["--latency-ms", "-5"], "--latency-ms"),
        (["--api-key", ""], "--api-key"),
    ],
)
def test_cli_bad_configuration_exits_2(args: list[str], names: str) -> None:
    proc = _run_cli("--port", "0", *args)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert names in err


def test_cli_port_in_use_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = _run_cli("--port", str(taken.getsockname()[1]))
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "--host/--port" in err and len(err.strip().splitlines()) == 1
