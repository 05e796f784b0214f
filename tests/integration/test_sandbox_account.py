"""The sandbox's account control over real HTTP: ``POST /_sandbox/account`` revokes or
rotates the API key and spends the sending quota at runtime; ``/_sandbox/reset`` gives the
start-up key back. No stack services needed."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mailbus.sandbox.server import ThreadedSandbox, start_in_thread

API_KEY = "test-key-account"
BODY = {"to": "ana@example.com", "template": "order_confirmation", "variables": {}}


@pytest.fixture
def sandbox() -> Iterator[ThreadedSandbox]:
    with start_in_thread(api_key=API_KEY, seed=1) as server:
        yield server


def send(sandbox: ThreadedSandbox, key: str, idempotency_key: str = "k1") -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": idempotency_key}
    return httpx.post(f"{sandbox.url}/v1/send", json=BODY, headers=headers, timeout=10)


def account(sandbox: ThreadedSandbox, document: object) -> httpx.Response:
    return httpx.post(f"{sandbox.url}/_sandbox/account", json=document, timeout=10)


def test_keys_are_revoked_and_rotated_at_runtime(sandbox: ThreadedSandbox) -> None:
    assert send(sandbox, API_KEY).status_code == 200
    assert account(sandbox, {"keys": []}).json() == {"keys": 0, "quota_retry_after": None}
    refused = send(sandbox, API_KEY, "k2")
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    account(sandbox, {"keys": ["rotated-key-1234"]}).raise_for_status()
    assert send(sandbox, API_KEY, "k2").status_code == 401
    assert send(sandbox, "rotated-key-1234", "k2").status_code == 200
    lookup = httpx.get(
        f"{sandbox.url}/v1/messages",
        params={"idempotency_key": "k2"},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert lookup.status_code == 401  # look-ups are held to the same keys
    httpx.post(f"{sandbox.url}/_sandbox/reset").raise_for_status()
    assert send(sandbox, API_KEY, "k3").status_code == 200


def test_a_spent_quota_refuses_every_send_until_it_is_lifted(sandbox: ThreadedSandbox) -> None:
    account(sandbox, {"quota": {"retry_after": 120}}).raise_for_status()
    refused = send(sandbox, API_KEY)
    assert refused.status_code == 429
    assert refused.json()["error"] == "quota_exceeded"
    assert refused.headers["Retry-After"] == "120"
    account(sandbox, {"quota": None}).raise_for_status()
    assert send(sandbox, API_KEY).status_code == 200
    ledger = httpx.get(f"{sandbox.url}/_sandbox/ledger").json()
    assert ledger["keys"]["k1"]["accepted"] == 1


@pytest.mark.parametrize(
    "document",
    [{"keys": "one"}, {"keys": [""]}, {"quota": {"retry_after": -1}}, {"other": 1}, []],
)
def test_a_bad_account_document_is_400(sandbox: ThreadedSandbox, document: object) -> None:
    assert account(sandbox, document).status_code == 400
