"""How often one may try to sign in, and how many passwords are hashed at once.

:class:`Throttle` is pure (the time is passed in). It counts failed sign-ins three ways:
per source address (whatever the names it tries), per name from one source, and per name
from everywhere. The first :attr:`Limits.free` failures of a count cost nothing; each one
after that doubles the wait before the count's key may try again (:attr:`Limits.base_s`,
capped at :attr:`Limits.cap_s`). The per-name count from everywhere holds only sources
that have failed themselves: anyone may flood failures at an operator's name from many
addresses, and a source with a clean record still signs in at once (OWASP's warning that
a plain per-account lockout is a denial of service against the account: "Slow Down Online
Guessing Attacks with Device Cookies", owasp.org/www-community); an IPv6 source is its
/64 (:func:`source_key`). A count forgets its failures :attr:`Limits.forget_s` after the
last one; a success clears its name's count from that source. At most
:attr:`Throttle.keys` counts are kept (the oldest go first), so a flood of made-up names
cannot grow memory.

:class:`Hashing` runs Argon2 verifications (64 MiB each) on a few threads of their own, so
pages never wait behind them. It admits at most ``threads + waiting`` checks, and fairly:
one at a time per source, one at a time per name among sources that have failed, and its
last ``kept`` places only for sources with a clean record. A try it does not admit is
refused at once (:class:`Busy`): a flood from one source, or from many at one name, can
neither exhaust memory nor keep a clean source's sign-in out.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Busy", "Hashing", "Limits", "Throttle", "source_key"]

T = TypeVar("T")
Key = tuple[str, ...]


def source_key(address: str) -> str:
    """The source a sign-in is counted against: an IPv4 address, or an IPv6 address's /64
    (one host commonly holds a whole /64: counted per address, each of its addresses
    would have a clean record); anything else as given, at most 64 characters."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass(frozen=True)
class Limits:
    free: int  # failures before any wait
    base_s: float = 1.0  # the first wait; each further failure doubles it
    cap_s: float = 300.0
    forget_s: float = 900.0


SOURCE = Limits(free=10)  # a proxy or an office behind one address: a little more room
PAIR = Limits(free=5)  # one name from one source
NAME = Limits(free=5)  # one name from everywhere: holds only sources that have failed


@dataclass
class _Failures:
    count: int
    last: float


@dataclass
class Throttle:
    source: Limits = SOURCE
    pair: Limits = PAIR
    name: Limits = NAME
    keys: int = 20_000
    _seen: OrderedDict[Key, _Failures] = field(default_factory=OrderedDict)

    def wait_s(self, source: str, name: str, now: float) -> float:
        """Seconds before ``source`` may try ``name`` again; 0: now."""
        waits = [
            self._wait(("source", source), self.source, now),
            self._wait(("pair", name, source), self.pair, now),
        ]
        if not self.clean(source, now):
            waits.append(self._wait(("name", name), self.name, now))
        return max(waits)

    def clean(self, source: str, now: float) -> bool:
        """Whether ``source`` has no failed sign-in on record (for any name)."""
        return self._current(("source", source), self.source, now) is None

    def failed(self, source: str, name: str, now: float) -> None:
        for key, limits in self._counts(source, name):
            seen = self._current(key, limits, now)
            self._seen[key] = _Failures((seen.count if seen else 0) + 1, now)
            self._seen.move_to_end(key)
        while len(self._seen) > self.keys:
            self._seen.popitem(last=False)

    def succeeded(self, source: str, name: str) -> None:
        self._seen.pop(("pair", name, source), None)

    def _counts(self, source: str, name: str) -> tuple[tuple[Key, Limits], ...]:
        # The source's count last: it is then the newest of the three, so the oldest-first
        # eviction never forgets that a source failed while it keeps a count it caused.
        return (
            (("name", name), self.name),
            (("pair", name, source), self.pair),
            (("source", source), self.source),
        )

    def _current(self, key: Key, limits: Limits, now: float) -> _Failures | None:
        seen = self._seen.get(key)
        if seen is not None and now - seen.last >= limits.forget_s:
            del self._seen[key]
            return None
        return seen

    def _wait(self, key: Key, limits: Limits, now: float) -> float:
        seen = self._current(key, limits, now)
        if seen is None or seen.count < limits.free:
            return 0.0
        doublings = min(seen.count - limits.free, 64)  # a flood's count overflows no float
        delay = min(limits.cap_s, limits.base_s * 2.0**doublings)
        return max(0.0, seen.last + delay - now)


class Busy(Exception):
    """Too many sign-ins are being checked (or this source's is): try again in a moment."""


class Hashing:
    """At most ``threads`` password checks at once and ``waiting`` more queued: one per
    source, one per name among sources that have failed, the last ``kept`` places for
    sources with a clean record only."""

    def __init__(self, threads: int = 2, waiting: int = 8, kept: int = 4) -> None:
        assert 0 <= kept < threads + waiting
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="console-argon2")
        self._places = threads + waiting
        self._kept = kept
        self._taken = 0
        self._busy: set[Key] = set()  # held by the check admitted for it

    async def run(self, fn: Callable[[], T], source: str, name: str, clean: bool) -> T:
        """``fn()`` on the pool, or :class:`Busy` at once. ``clean``: the source has no
        failure on record (:meth:`Throttle.clean`). Called on the event loop only."""
        keys: tuple[Key, ...] = (("source", source),) + (() if clean else (("name", name),))
        places = self._places - (0 if clean else self._kept)
        if self._taken >= places or not self._busy.isdisjoint(keys):
            raise Busy()
        self._taken += 1
        self._busy.update(keys)
        loop = asyncio.get_running_loop()

        def done(_: Future[T]) -> None:  # when the thread is done, not when the caller goes
            loop.call_soon_threadsafe(self._release, keys)

        checked = self._pool.submit(fn)
        checked.add_done_callback(done)
        return await asyncio.wrap_future(checked)

    def _release(self, keys: tuple[Key, ...]) -> None:
        self._taken -= 1
        self._busy.difference_update(keys)
