"""The global rate limit: a token bucket in PostgreSQL shared by all consumer processes.

Why PostgreSQL and not a share of the rate per process: a share must be recomputed
whenever a process joins or dies, and a dead process's share is lost until then; the
bucket needs no membership at all, and every process already talks to the database. Each
process takes up to ``batch`` tokens per UPDATE (a few per second at most), so the
database sees ``rate / batch`` small updates per second in total. The largest burst in
any second is the rate plus the bucket's capacity plus what processes hold locally.
"""

from __future__ import annotations

import logging
import math

import psycopg

from mailbus.consumer.held_tokens import HeldTokens
from mailbus.kernel import schema_guard
from mailbus.kernel.pooling import connect_options
from mailbus_client.sqlfiles import load_queries

__all__ = ["GlobalRateLimiter"]

log = logging.getLogger("mailbus.rate_limit")


class GlobalRateLimiter:
    def __init__(
        self,
        database_url: str,
        rate: float,
        name: str = "provider",
        transaction_pooling: bool = False,
    ) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate * 0.2)
        self.batch = int(max(1, min(self.capacity, math.ceil(rate / 20))))
        self._database_url = database_url
        self._connect_options = connect_options(transaction_pooling)
        self._name = name
        self._queries = load_queries("mailbus.consumer", "protection.sql")
        self._conn: psycopg.AsyncConnection | None = None
        self._held = HeldTokens()

    async def acquire(self) -> None:
        """Wait until this process may make one provider request."""
        await self._held.spend(self._take)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _take(self) -> tuple[int, float]:
        try:
            conn = await self._connection()
            cursor = await conn.execute(
                self._queries["take_tokens"], {"name": self._name, "want": self.batch}
            )
            row = await cursor.fetchone()
        except psycopg.Error as exc:
            log.warning("rate limiter cannot reach the database: %s", exc)
            await self.close()
            return 0, 1.0
        if row is None:  # the bucket row is gone (a fresh schema): recreate it
            await self.close()
            return 0, 0.1
        granted, available, rate = int(row[0]), float(row[1]), float(row[2])
        return granted, max(0.005, (1.0 - (available - granted)) / rate)

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None:
            conn = await psycopg.AsyncConnection.connect(
                self._database_url, autocommit=True, connect_timeout=5, **self._connect_options
            )
            await schema_guard.check_async(conn)
            self._conn = conn
            await self._conn.execute(
                self._queries["configure_bucket"],
                {"name": self._name, "rate": self.rate, "capacity": self.capacity},
            )
        return self._conn
