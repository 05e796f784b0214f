"""How often one may try to sign in, and how many passwords are hashed at once.

:class:`Throttle` is pure (the time is passed in): it counts failed sign-ins per source
address and per name. The first :attr:`Limits.free` failures of a key cost nothing; each
one after that doubles the wait before the key may try again (:attr:`Limits.base_s`,
capped at :attr:`Limits.cap_s`). A key forgets its failures :attr:`Limits.forget_s` after
the last one, and a success clears the name's. At most :attr:`Throttle.keys` keys are kept
(the oldest go first), so a flood of made-up names cannot grow memory.

:class:`Hashing` runs Argon2 verifications (64 MiB each) on a few threads of their own, so
pages never wait behind them, and refuses a try outright once :attr:`Hashing.waiting` are
queued: a few dozen parallel tries get 503, not an out-of-memory kill.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Busy", "Hashing", "Limits", "Throttle"]

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    free: int  # failures before any wait
    base_s: float = 1.0  # the first wait; each further failure doubles it
    cap_s: float = 300.0
    forget_s: float = 900.0


SOURCE = Limits(free=10)  # a proxy or an office behind one address: a little more room
NAME = Limits(free=5)


@dataclass
class _Failures:
    count: int
    last: float


@dataclass
class Throttle:
    source: Limits = SOURCE
    name: Limits = NAME
    keys: int = 20_000
    _seen: OrderedDict[tuple[str, str], _Failures] = field(default_factory=OrderedDict)

    def wait_s(self, source: str, name: str, now: float) -> float:
        """Seconds before ``source`` may try ``name`` again; 0: now."""
        return max(
            self._wait(("source", source), self.source, now),
            self._wait(("name", name), self.name, now),
        )

    def failed(self, source: str, name: str, now: float) -> None:
        for key, limits in ((("source", source), self.source), (("name", name), self.name)):
            seen = self._current(key, limits, now)
            self._seen[key] = _Failures((seen.count if seen else 0) + 1, now)
            self._seen.move_to_end(key)
        while len(self._seen) > self.keys:
            self._seen.popitem(last=False)

    def succeeded(self, name: str) -> None:
        self._seen.pop(("name", name), None)

    def _current(self, key: tuple[str, str], limits: Limits, now: float) -> _Failures | None:
        seen = self._seen.get(key)
        if seen is not None and now - seen.last >= limits.forget_s:
            del self._seen[key]
            return None
        return seen

    def _wait(self, key: tuple[str, str], limits: Limits, now: float) -> float:
        seen = self._current(key, limits, now)
        if seen is None or seen.count < limits.free:
            return 0.0
        delay = min(limits.cap_s, limits.base_s * 2.0 ** (seen.count - limits.free))
        return max(0.0, seen.last + delay - now)


class Busy(Exception):
    """Too many sign-ins are being checked: try again in a moment."""


class Hashing:
    """At most ``threads`` password checks at once, at most ``waiting`` more queued."""

    def __init__(self, threads: int = 2, waiting: int = 8) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="console-argon2")
        self._slots = threading.BoundedSemaphore(threads + waiting)
        self.waiting = waiting

    async def run(self, fn: Callable[[], T]) -> T:
        if not self._slots.acquire(blocking=False):
            raise Busy()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        finally:
            self._slots.release()
