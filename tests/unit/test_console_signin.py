"""Sign-in limits (pure, time passed in), the bounded hashing pool, and the console's
security settings."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mailbus.console.access import Sessions, User
from mailbus.console.signin import Busy, Hashing, Limits, Throttle
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_a_name_may_fail_a_few_times_then_waits_twice_as_long_each_time() -> None:
    throttle = Throttle(source=Limits(free=100), name=Limits(free=3, base_s=1, cap_s=8))
    waits = []
    for n in range(7):
        waits.append(throttle.wait_s("10.0.0.1", "ana", 100.0 + n * 0.0))
        throttle.failed("10.0.0.1", "ana", 100.0)
    assert waits == [0, 0, 0, 1, 2, 4, 8]
    assert throttle.wait_s("10.0.0.1", "ana", 100.0 + 8) == 0  # the cap has passed
    assert throttle.wait_s("10.0.0.2", "bob", 100.0) == 0  # other names are free


def test_a_source_is_held_whatever_the_names_it_tries() -> None:
    throttle = Throttle(source=Limits(free=2, base_s=5), name=Limits(free=100))
    for name in ("a", "b"):
        throttle.failed("10.0.0.1", name, 0.0)
    assert throttle.wait_s("10.0.0.1", "c", 1.0) == 4
    assert throttle.wait_s("10.0.0.9", "c", 1.0) == 0


def test_failures_are_forgotten_after_a_while_and_a_success_clears_the_name() -> None:
    throttle = Throttle(source=Limits(free=100), name=Limits(free=1, forget_s=60))
    throttle.failed("s", "ana", 0.0)
    assert throttle.wait_s("s", "ana", 0.5) > 0
    assert throttle.wait_s("s", "ana", 60.0) == 0
    throttle.failed("s", "ana", 100.0)
    throttle.succeeded("ana")
    assert throttle.wait_s("s", "ana", 100.0) == 0


def test_the_keys_kept_are_bounded() -> None:
    throttle = Throttle(keys=10)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", f"name-{n}", 0.0)
    assert len(throttle._seen) == 10


def test_the_hashing_pool_refuses_beyond_its_threads_and_queue() -> None:
    release = threading.Event()

    async def main() -> list[object]:
        hashing = Hashing(threads=1, waiting=1)
        tries = [asyncio.ensure_future(hashing.run(lambda: release.wait(10))) for _ in range(4)]
        while sum(t.done() for t in tries) < 2:
            await asyncio.sleep(0.01)
        release.set()
        return await asyncio.gather(*tries, return_exceptions=True)

    results = asyncio.run(main())
    assert results.count(True) == 2
    assert [type(r) for r in results if r is not True] == [Busy, Busy]


BASE = {"MAILBUS_DATABASE_URL": "postgresql://x/y"}


@pytest.mark.parametrize(
    ("env", "secure"),
    [
        ({}, False),
        ({"MAILBUS_CONSOLE_LISTEN": "0.0.0.0:8027"}, True),
        ({"MAILBUS_CONSOLE_LISTEN": "[::1]:8027"}, False),
        ({"MAILBUS_CONSOLE_LISTEN": "0.0.0.0:8027", "MAILBUS_CONSOLE_SECURE_COOKIE": "off"}, False),
        ({"MAILBUS_CONSOLE_SECURE_COOKIE": "true"}, True),
    ],
)
def test_secure_cookies_are_on_unless_listening_on_loopback(
    env: dict[str, str], secure: bool
) -> None:
    assert load_settings({**BASE, **env}).console_secure_cookie is secure


def test_proxy_sources_and_limits_are_checked() -> None:
    settings = load_settings({**BASE, "MAILBUS_CONSOLE_PROXY_SOURCES": "10.1.0.0/16, 192.0.2.7"})
    assert settings.console_proxy_sources == ("10.1.0.0/16", "192.0.2.7/32")
    with pytest.raises(ConfigError, match="MAILBUS_CONSOLE_PROXY_SOURCES"):
        load_settings({**BASE, "MAILBUS_CONSOLE_PROXY_SOURCES": "ingress-nginx"})
    with pytest.raises(ConfigError, match="MAILBUS_CONSOLE_UPLOAD_MAX_ROWS"):
        load_settings({**BASE, "MAILBUS_CONSOLE_UPLOAD_MAX_ROWS": "0"})


def test_expired_sessions_are_swept_at_the_next_sign_in() -> None:
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0], ttl_s=10)
    first = sessions.open(User("ana", "operator"))
    now[0] = 20.0
    sessions.open(User("vic", "viewer"))
    assert len(sessions._open) == 1 and sessions.get(first) is None
