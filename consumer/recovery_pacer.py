"""The recovery cap (``core.recovery``) shared by every consumer process, in PostgreSQL.

One ``recovery_pacing`` row per provider holds the ramp's start and a token bucket; a
process whose breaker closes after an outage restarts the ramp for everyone, and every
send of every process takes a token while the ramp lasts, P0 first. Outside a ramp a
process only reads the ramp's start, at most once a second; an unreachable database does
not hold sends back (the cap protects reputation, it is not a guarantee the table needs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import psycopg

from mailbus.consumer.core.recovery import RecoveryPolicy, recovery_rate
from mailbus.consumer.held_tokens import HeldTokens
from mailbus.kernel import schema_guard
from mailbus.kernel.pooling import connect_options
from mailbus_client.sqlfiles import load_queries

__all__ = ["RecoveryPacer"]

log = logging.getLogger("mailbus.recovery")

_RECHECK_S = 1.0  # how stale this process's view of the ramp's start may be


class RecoveryPacer:
    def __init__(
        self,
        database_url: str,
        provider: str,
        policy: RecoveryPolicy,
        clock: Callable[[], float] = time.monotonic,
        transaction_pooling: bool = False,
    ) -> None:
        self.policy = policy
        self._database_url = database_url
        self._connect_options = connect_options(transaction_pooling)
        self._provider = provider
        self._clock = clock
        self._queries = load_queries("mailbus.consumer", "recovery.sql")
        self._conn: psycopg.AsyncConnection | None = None
        self._elapsed_at: tuple[float | None, float] = (None, -1e18)  # (elapsed, read at)
        self._held = HeldTokens()
        # held while the ramp starts: a send asking meanwhile would read "no ramp" (cached
        # for a second) and go out uncapped
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """A breaker closed after an outage: restart the ramp for every process. This
        process's sends that ask for a token meanwhile wait for the start."""
        async with self._starting:
            try:
                await self._run("start_recovery")
                self._elapsed_at = (0.0, self._clock())
                self._held.drop()
                log.warning(
                    "provider recovered: sends capped, ramping up (MAILBUS_RECOVERY_RATE)"
                )
            except psycopg.Error as exc:
                log.warning("cannot start the recovery ramp: %s", exc)

    async def acquire(self, p0: bool) -> None:
        """Wait until one send may go out under the recovery cap (at once when no ramp)."""
        async with self._starting:
            pass  # a ramp being started: its cap applies to this send

        async def take() -> tuple[int, float] | None:
            rate = recovery_rate(self.policy, await self._elapsed())
            return None if rate is None else await self._take(rate, p0)

        await self._held.spend(take)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _elapsed(self) -> float | None:
        elapsed, read_at = self._elapsed_at
        now = self._clock()
        if now - read_at < _RECHECK_S:
            return None if elapsed is None else elapsed + (now - read_at)
        try:
            rows = await self._run("recovery_elapsed")
        except psycopg.Error as exc:
            log.warning("recovery pacing cannot reach the database: %s", exc)
            rows = []
        elapsed = None if not rows or rows[0][0] is None else float(str(rows[0][0]))
        self._elapsed_at = (elapsed, now)
        return elapsed

    async def _take(self, rate: float, p0: bool) -> tuple[int, float]:
        want = max(1, int(rate // 20))
        params: dict[str, object] = {
            "rate": rate,
            "capacity": max(1.0, rate),
            "want": want,
            "p0": p0,
        }
        try:
            rows = await self._run("take_recovery_tokens", params)
        except psycopg.Error as exc:
            log.warning("recovery pacing cannot reach the database: %s", exc)
            return want, 0.0  # do not hold sends back on a database hiccup
        if not rows:
            return want, 0.0  # no ramp row (a fresh schema): no cap
        granted, available = int(str(rows[0][0])), float(str(rows[0][1]))
        if granted == 0 and available >= 1:
            return 0, 0.1  # held for a waiting P0 send
        return granted, min(1.0, max(0.01, (1.0 - (available - granted)) / rate))

    async def _run(
        self, query: str, params: dict[str, object] | None = None
    ) -> list[tuple[object, ...]]:
        try:
            if self._conn is None:
                conn = await psycopg.AsyncConnection.connect(
                    self._database_url, autocommit=True, connect_timeout=5, **self._connect_options
                )
                await schema_guard.check_async(conn)
                self._conn = conn
            cursor = await self._conn.execute(
                self._queries[query], {"provider": self._provider, **(params or {})}
            )
            return await cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            await self.close()
            raise
