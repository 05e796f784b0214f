"""PostgreSQL side of delivery: load, claim and settle ``email_sends`` rows.

Every state change is one guarded UPDATE (``… WHERE id = %s AND status = … RETURNING``):
zero rows means someone else owns the row and the caller moves on. Dead letters are
written in the same statement as the ``failed`` status; the relay publishes them.
psycopg errors become :class:`StorageError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from consumer.core import Decision, SendView, Status
from mailbus.errors import StorageError
from mailbus.sqlfiles import load_queries

__all__ = ["LoadedSend", "MessageOrigin", "SendLedger", "dead_letter_reason"]


@dataclass(frozen=True)
class LoadedSend:
    view: SendView
    variables: dict[str, Any]
    suppressed: bool
    provider: str | None  # who took the latest call; None = the primary


@dataclass(frozen=True)
class MessageOrigin:
    """Where a Kafka message came from, for dead letters."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None


class SendLedger:
    def __init__(self, database_url: str, max_connections: int) -> None:
        self._pool = AsyncConnectionPool(
            database_url,
            min_size=1,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": 5},
            reconnect_timeout=3600,
        )
        self._queries = load_queries("consumer", "queries.sql")

    async def open(self) -> None:
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    async def load(self, send_id: int) -> LoadedSend | None:
        row = await self._fetchone("load_send", {"id": send_id})
        return None if row is None else _loaded(row)

    async def claim_for_send(
        self, send_id: int, attempt: int, lease_s: float, provider: str | None
    ) -> uuid.UUID | None:
        """pending → sending for the attempt the pointer names; None if not ours to send."""
        token = uuid.uuid4()
        params = {
            "id": send_id,
            "attempt": attempt,
            "token": token,
            "lease_s": lease_s,
            "provider": provider,
        }
        row = await self._fetchone("claim_for_send", params)
        return None if row is None else token

    async def settle_gate(
        self, send: SendView, decision: Decision, origin: MessageOrigin | None
    ) -> bool:
        """Record a decision taken before any call, on a row still ``pending``."""
        return await self._settle(send, None, decision, origin, None)

    async def settle_call(
        self,
        send: SendView,
        token: uuid.UUID,
        decision: Decision,
        origin: MessageOrigin | None,
        latency_ms: int | None = None,
    ) -> bool:
        """Record the outcome of the lease holder's call (``latency_ms`` set) or look-up."""
        return await self._settle(send, token, decision, origin, latency_ms)

    async def record_undecodable(self, origin: MessageOrigin, error: str) -> None:
        params = {
            "error": error[:500],
            "topic": origin.topic,
            "partition": origin.partition,
            "offset": origin.offset,
            "key": origin.key,
            "value": origin.value,
        }
        try:
            async with self._pool.connection() as conn:
                await conn.execute(self._queries["insert_dead_letter"], params)
        except psycopg.Error as exc:
            raise StorageError(f"cannot record an undecodable message: {exc}") from exc

    async def take_unresolved(
        self, priorities: Sequence[str], lease_s: float, limit: int
    ) -> list[tuple[LoadedSend, uuid.UUID]]:
        token = uuid.uuid4()
        params = {
            "priorities": list(priorities),
            "lease_s": lease_s,
            "limit": limit,
            "token": token,
        }
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(self._queries["take_unresolved"], params)
                return [(_loaded(row), token) for row in await cursor.fetchall()]
        except psycopg.Error as exc:
            raise StorageError(f"cannot take unresolved sends: {exc}") from exc

    async def republish_stale(
        self, priorities: Sequence[str], after_s: float, limit: int = 1000
    ) -> int:
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(
                    self._queries["republish_stale"],
                    {"priorities": list(priorities), "after_s": after_s, "limit": limit},
                )
                return cursor.rowcount
        except psycopg.Error as exc:
            raise StorageError(f"cannot republish stale sends: {exc}") from exc

    async def report_health(self, process: str, provider: str, state: str) -> None:
        """Publish this process's breaker state for `mailbus status` (best effort)."""
        params = {"process": process, "provider": provider, "state": state}
        try:
            async with self._pool.connection() as conn:
                await conn.execute(
                    load_queries("consumer", "protection.sql")["report_health"], params
                )
        except psycopg.Error as exc:
            raise StorageError(f"cannot report provider health: {exc}") from exc

    async def _fetchone(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(self._queries[query], params)
                return await cursor.fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"{query} failed: {exc}") from exc

    async def _settle(
        self,
        send: SendView,
        token: uuid.UUID | None,
        decision: Decision,
        origin: MessageOrigin | None,
        latency_ms: int | None,
    ) -> bool:
        """One guarded statement; False if the row was not in the state it guards on."""
        params = {
            "id": send.id,
            "attempt": send.attempts,
            "token": token,
            "status": decision.next_status.value,
            "next_try_at": decision.retry_at,
            "last_error": decision.reason or None,
            "message_id": decision.message_id,
            "latency_ms": latency_ms,
            **_dead_letter_params(decision, origin),
        }
        row = await self._fetchone("settle", params)
        return row is not None and row[0] == 1


def _loaded(row: tuple[Any, ...]) -> LoadedSend:
    (
        send_id,
        key,
        to,
        template,
        payload,
        priority,
        status,
        attempts,
        expires,
        next_try,
        provider,
        suppressed,
    ) = row
    view = SendView(
        send_id, key, to, template, priority, Status(status), attempts, expires, next_try
    )
    variables = payload if isinstance(payload, dict) else {}
    return LoadedSend(view, variables, bool(suppressed), provider)


def dead_letter_reason(decision: Decision) -> str:
    """The dead letter's ``reason``: rejected, max_attempts or invalid."""
    if decision.reason.startswith("gave up"):
        return "max_attempts"
    if decision.status_code is not None:
        return "rejected"
    return "invalid"


def _dead_letter_params(decision: Decision, origin: MessageOrigin | None) -> dict[str, Any]:
    return {
        "dead_letter": decision.dead_letter,
        "dl_reason": dead_letter_reason(decision),
        "dl_error": decision.reason[:500],
        "status_code": decision.status_code,
        "topic": origin.topic if origin else None,
        "partition": origin.partition if origin else None,
        "offset": origin.offset if origin else None,
    }
