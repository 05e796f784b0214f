"""How a migration waits for its locks without stopping writers (docs/runbook.md#upgrades).

PostgreSQL queues lock requests: an ``ALTER TABLE`` waiting for ``ACCESS EXCLUSIVE``
behind one long transaction makes every insert that comes after it wait too. So each try
of a migration waits at most :attr:`LockWait.lock_timeout_s` for a lock (``lock_timeout``,
set for its transaction only), then gives up, backs off and tries again, naming the
transactions it waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from mailbus.kernel.errors import StorageError

__all__ = ["LockWait", "LockWaiter", "retry_delay", "waiting_for"]

log = logging.getLogger("mailbus.app.migrate")

_WAITING_FOR = """
SELECT pid, state, extract(epoch FROM clock_timestamp() - xact_start)::int, left(query, 60)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
  AND xact_start < clock_timestamp() - make_interval(secs => %(older_s)s)
ORDER BY xact_start LIMIT 3
"""


@dataclass(frozen=True)
class LockWait:
    """How a migration waits for its locks: each try at most ``lock_timeout_s`` per lock
    (what writers queued behind it may wait), tries ``first_delay_s`` apart, doubling up to
    ``cap_s``, for up to ``max_wait_s`` in all."""

    lock_timeout_s: float = 0.05
    max_wait_s: float = 300.0
    first_delay_s: float = 0.5
    cap_s: float = 15.0

    def __post_init__(self) -> None:
        if not (self.lock_timeout_s > 0 and self.max_wait_s >= 0 and self.first_delay_s > 0):
            raise ValueError("a lock timeout and a first delay must be > 0, a wait >= 0")


def retry_delay(wait: LockWait, tries: int, rand: Callable[[], float]) -> float:
    """Seconds before try ``tries + 1`` (pure): doubling from ``first_delay_s`` up to
    ``cap_s``, jittered to between half and all of it, so migrators do not try in step."""
    full = min(wait.first_delay_s * 2 ** max(tries - 1, 0), wait.cap_s)
    return float(full * (0.5 + rand() / 2))


@dataclass(frozen=True)
class LockWaiter:
    wait: LockWait
    sleep: Callable[[float], None]
    clock: Callable[[], float]
    rand: Callable[[], float]

    def run(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        label: str,
        apply: Callable[[], None],
    ) -> None:
        """``apply`` (one transaction) with the lock timeout, tried again after a backoff
        while a lock it needs is held, for up to ``max_wait_s``."""
        started, tries = self.clock(), 0
        while True:
            tries += 1
            try:
                with conn.transaction():
                    conn.execute(
                        "SELECT set_config('lock_timeout', %s, true)",
                        (f"{self.wait.lock_timeout_s * 1000:.0f}ms",),
                    )
                    apply()
                return
            except psycopg.errors.LockNotAvailable:
                blockers = waiting_for(conn, self.clock() - started)
                delay = retry_delay(self.wait, tries, self.rand)
                if self.clock() - started + delay > self.wait.max_wait_s:
                    raise StorageError(
                        f"{label} did not get its locks within {self.wait.max_wait_s:g} s"
                        f" ({tries} tries), waiting for {blockers}; it was not applied"
                    ) from None
                log.warning(
                    "%s waits for a lock held by %s: trying again in %.1f s (try %d)",
                    label,
                    blockers,
                    delay,
                    tries,
                )
                self.sleep(delay)


def waiting_for(conn: psycopg.Connection[tuple[object, ...]], older_s: float) -> str:
    """The oldest open transactions of the database: those a migration waits for."""
    rows = conn.execute(_WAITING_FOR, {"older_s": max(older_s, 0.0)}).fetchall()
    if not rows:
        return "a transaction that ended since"
    return "; ".join(
        f"pid {pid} ({state}, in a transaction for {age} s: {query!r})"
        for pid, state, age, query in rows
    )
