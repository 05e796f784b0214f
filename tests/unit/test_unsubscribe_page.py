"""The unsubscribe routes over a fake suppression store: what reaches the store, and the
answers when it fails. The real store is exercised in tests/integration/test_unsubscribe.py."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from mailbus.campaigns.unsubscribe import make_token
from mailbus.feedback.unsubscribe_page import add_unsubscribe_routes
from mailbus.kernel.errors import StorageError

SECRET = "unsub_unit_secret"
T0 = 1_764_576_000


class FakeStore:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def unsubscribe(self, address: str, source: str) -> bool:
        self.calls.append((address, source))
        if self.fail:
            raise StorageError("database down")
        return len(self.calls) == 1


def exchange(store: FakeStore, method: str, token: str) -> tuple[int, str, dict[str, str]]:
    async def main() -> tuple[int, str, dict[str, str]]:
        app = web.Application()
        add_unsubscribe_routes(app, store, SECRET, clock=lambda: T0)
        async with TestClient(TestServer(app)) as client:
            response = await client.request(
                method, f"/unsubscribe/{token}", data="List-Unsubscribe=One-Click"
            )
            return response.status, await response.text(), dict(response.headers)

    return asyncio.run(main())


def test_get_shows_a_form_and_never_touches_the_store() -> None:
    store = FakeStore()
    status, page, headers = exchange(store, "GET", make_token(SECRET, "Ana@x.test", 3, T0))
    assert status == 200 and '<form method="post">' in page and "ana@x.test" in page
    assert headers["Cache-Control"] == "no-store"
    assert store.calls == []


def test_post_unsubscribes_the_token_address_from_its_campaign() -> None:
    store = FakeStore()
    token = make_token(SECRET, "Ana@x.test", 3, T0)
    assert exchange(store, "POST", token)[0] == 200
    assert exchange(store, "POST", token)[0] == 200
    assert store.calls == [("ana@x.test", "campaign:3")] * 2


def test_an_address_in_the_page_is_escaped() -> None:
    store = FakeStore()
    _status, page, _ = exchange(store, "GET", make_token(SECRET, "<b>@x.test", 3, T0))
    assert "<b>@" not in page and "&lt;b&gt;@x.test" in page


def test_an_invalid_token_is_404_and_never_reaches_the_store() -> None:
    store = FakeStore()
    for method in ("GET", "POST"):
        assert exchange(store, method, make_token("other", "ana@x.test", 3, T0))[0] == 404
        assert exchange(store, method, "not-a-token")[0] == 404
    assert store.calls == []


def test_a_storage_failure_is_503_with_retry_after() -> None:
    store = FakeStore(fail=True)
    status, _page, headers = exchange(store, "POST", make_token(SECRET, "ana@x.test", 3, T0))
    assert (status, headers["Retry-After"]) == (503, "5")
