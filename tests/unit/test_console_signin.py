"""Sign-in limits (pure, time passed in), the bounded hashing pool, and the console's
security settings."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mailbus.console.access import Sessions, User
from mailbus.console.signin import Busy, Hashing, Limits, Throttle, source_key
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


def test_a_name_may_fail_a_few_times_from_a_source_then_waits_twice_as_long_each_time() -> None:
    throttle = Throttle(source=Limits(free=100), pair=Limits(free=3, base_s=1, cap_s=8))
    waits = []
    for _ in range(7):
        waits.append(throttle.wait_s("10.0.0.1", "ana", 100.0))
        throttle.failed("10.0.0.1", "ana", 100.0)
    assert waits == [0, 0, 0, 1, 2, 4, 8]
    assert throttle.wait_s("10.0.0.1", "ana", 100.0 + 8) == 0  # the cap has passed
    assert throttle.wait_s("10.0.0.2", "bob", 100.0) == 0  # other names are free


def test_a_source_is_held_whatever_the_names_it_tries() -> None:
    throttle = Throttle(source=Limits(free=2, base_s=5), pair=Limits(free=100))
    for name in ("a", "b"):
        throttle.failed("10.0.0.1", name, 0.0)
    assert throttle.wait_s("10.0.0.1", "c", 1.0) == 4
    assert throttle.wait_s("10.0.0.9", "c", 1.0) == 0


def test_failures_at_a_name_from_everywhere_hold_only_sources_that_failed() -> None:
    throttle = Throttle(name=Limits(free=3, base_s=10, cap_s=60))
    for n in range(1000):  # one failure from each of 1000 sources: none is held by its own
        assert throttle.wait_s(f"10.0.{n // 256}.{n % 256}", "ana", 0.0) == 0
        throttle.failed(f"10.0.{n // 256}.{n % 256}", "ana", 0.0)
    assert throttle.wait_s("10.0.0.7", "ana", 1.0) == 59  # the cap: no overflow at 2**997
    assert throttle.clean("192.0.2.1", 1.0)
    assert throttle.wait_s("192.0.2.1", "ana", 1.0) == 0  # a clean record: never held
    throttle.failed("192.0.2.1", "bob", 1.0)  # once it fails, at any name ...
    assert not throttle.clean("192.0.2.1", 1.0)
    assert throttle.wait_s("192.0.2.1", "ana", 1.0) == 59  # ... the flood's wait holds it
    assert throttle.clean("192.0.2.1", 901.0)  # until its failure is forgotten


def test_failures_are_forgotten_after_a_while_and_a_success_clears_its_own() -> None:
    throttle = Throttle(source=Limits(free=100), pair=Limits(free=1, forget_s=60))
    throttle.failed("s", "ana", 0.0)
    assert throttle.wait_s("s", "ana", 0.5) > 0
    assert throttle.wait_s("s", "ana", 60.0) == 0
    throttle.failed("s", "ana", 100.0)
    throttle.failed("t", "ana", 100.0)
    throttle.succeeded("s", "ana")
    assert throttle.wait_s("s", "ana", 100.0) == 0
    assert throttle.wait_s("t", "ana", 100.0) > 0  # another source's failures stay


def test_the_keys_kept_are_bounded_and_a_source_outlives_its_counts() -> None:
    throttle = Throttle(keys=10)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", f"name-{n}", 0.0)
    assert len(throttle._seen) == 10
    assert not throttle.clean("10.0.3.231", 0.0)  # the last source's failure is kept


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:0:1::7", "2001:db8:0:1::/64"),
        ("2001:db8:0:1:ffff:1:2:3", "2001:db8:0:1::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("-", "-"),
        ("x" * 500, "x" * 64),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_64(address: str, key: str) -> None:
    assert source_key(address) == key


def checks(hashing: Hashing, tries: list[tuple[str, str, bool]]) -> list[object]:
    """Run ``tries`` (source, name, clean) at once, each check held until all are in."""
    release = threading.Event()

    async def main() -> list[object]:
        futures = [
            asyncio.ensure_future(hashing.run(lambda: release.wait(10), *each)) for each in tries
        ]
        await asyncio.sleep(0)  # every try asked (and each admitted or refused at once)
        release.set()
        return await asyncio.gather(*futures, return_exceptions=True)

    return asyncio.run(main())


def test_the_hashing_pool_refuses_beyond_its_threads_and_queue() -> None:
    hashing = Hashing(threads=1, waiting=1, kept=0)
    results = checks(hashing, [(f"s{n}", f"n{n}", True) for n in range(4)])
    assert results.count(True) == 2
    assert [type(r) for r in results if r is not True] == [Busy, Busy]


def test_the_hashing_pool_admits_one_check_per_source_and_per_name_of_failed_sources() -> None:
    hashing = Hashing(threads=2, waiting=8, kept=4)
    one_source = [("s", f"n{n}", False) for n in range(5)]
    one_name = [(f"t{n}", "ana", False) for n in range(5)]
    failed_elsewhere = [(f"u{n}", f"m{n}", False) for n in range(5)]  # up to 10 - 4 kept
    clean = [(f"v{n}", "ana", True) for n in range(5)]  # the 4 kept, and the room left
    results = checks(hashing, one_source + one_name + failed_elsewhere + clean)
    admitted = [
        "".join("y" if r is True else "-" for r in results[n : n + 5]) for n in (0, 5, 10, 15)
    ]
    assert admitted == [
        "y----",  # one per source
        "y----",  # one per name among sources that failed
        "yyyy-",  # 6 places for failed sources in all
        "yyyy-",  # clean sources: the rest, the 4 kept included
    ]
    assert hashing._taken == 0 and not hashing._busy  # every place given back


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
