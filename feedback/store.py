"""PostgreSQL side of delivery events: one statement per event (``feedback/events.sql``).

The statement stores the event once per (provider, event id) and, only when it was new,
updates the sends with its ``message_id`` (guarded by ``last_event_at``, so an older event
arriving late does not overwrite a newer one) and suppresses their addresses after a hard
bounce or a complaint. Each statement is its own transaction. psycopg errors become
:class:`StorageError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg_pool import AsyncConnectionPool

from feedback.events import STATUS_RANK, DeliveryEvent
from mailbus.errors import StorageError
from mailbus.sqlfiles import load_queries

__all__ = ["EventStore", "Recorded"]


@dataclass(frozen=True)
class Recorded:
    """What one event did: ``new`` (False: a duplicate, nothing changed), ``matched`` (a
    send has its message_id), ``updated`` sends, ``suppressed`` addresses added."""

    new: bool
    matched: bool
    updated: int
    suppressed: int

    @property
    def result(self) -> str:
        """``stored``, ``duplicate`` or ``unmatched`` (stored, no send has its message_id)."""
        if not self.new:
            return "duplicate"
        return "stored" if self.matched else "unmatched"


class EventStore:
    def __init__(self, database_url: str, max_connections: int = 10) -> None:
        self._pool = AsyncConnectionPool(
            database_url,
            min_size=1,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": 5},
            reconnect_timeout=3600,
        )
        self._queries = load_queries("feedback", "events.sql")

    async def open(self) -> None:
        try:
            await self._pool.open(wait=True, timeout=10)
        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout is one too
            raise StorageError(f"cannot reach PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        await self._pool.close()

    async def record(self, provider: str, event: DeliveryEvent) -> Recorded:
        params = {
            "provider": provider,
            "event_id": event.event_id,
            "type": event.type,
            "bounce": event.bounce,
            "message_id": event.message_id,
            "occurred_at": event.occurred_at,
            "ranks": list(STATUS_RANK),
            "rank": event.rank,
            "suppress": event.suppresses,
            "reason": event.suppression_reason if event.suppresses else None,
            "source": f"webhook:{provider}",
        }
        try:
            async with self._pool.connection(timeout=10) as conn:
                cursor = await conn.execute(self._queries["record_event"], params)
                row = await cursor.fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"recording a delivery event failed: {exc}") from exc
        assert row is not None
        return Recorded(bool(row[0]), bool(row[1]), int(row[2]), int(row[3]))

    async def ready(self) -> bool:
        """Whether PostgreSQL answers within a second or two."""
        try:
            async with self._pool.connection(timeout=2) as conn:
                await conn.execute(self._queries["ready"])
        except (psycopg.Error, TimeoutError):
            return False
        return True
