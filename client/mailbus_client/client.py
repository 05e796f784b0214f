"""The client a domain service keeps: its configuration given once, explicitly, and the
calls it makes inside its own transaction.

    client = Client(cap=QueueCap(100_000))   # or Client.from_environ(), read once
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", (1042,))
        client.enqueue(conn, SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"))

:class:`AsyncClient` is the same on a ``psycopg.AsyncConnection``. No call commits: the rows
become visible to the relay exactly when the caller's business change does, and a rollback
leaves neither. Both run the flows of :mod:`mailbus_client.steps`.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import psycopg

from mailbus_client.db_schema import DEFAULT_SCHEMA, parse_schema
from mailbus_client.policies import PolicyBook, QueueCap, configured_policy_book
from mailbus_client.send_request import SendRequest
from mailbus_client.steps import (
    EnqueueResult,
    Rows,
    SendStatus,
    Statement,
    cancel_steps,
    enqueue_many_steps,
    enqueue_steps,
    status_steps,
)
from mailbus_client.trace_context import TraceContext, current_trace_context

__all__ = ["AsyncClient", "Client", "EnqueueResult", "SendStatus", "run", "run_async"]

T = TypeVar("T")


def _shipped_book() -> PolicyBook:
    return configured_policy_book({})  # mailbus_client/mail_policies.json, read once


@dataclass(frozen=True)
class _Config:
    """``policies``: the default expiry per template (default: the shipped book).
    ``cap``: the bound on open rows (default unbounded). ``trace``: record the current
    OpenTelemetry span's context on rows that name none (default True). ``schema``: where
    mailbus's tables are (MAILBUS_DB_SCHEMA of its processes; default ``mailbus``), named
    in every statement, so the connection's own search_path does not matter."""

    policies: PolicyBook = field(default_factory=_shipped_book)
    cap: QueueCap = field(default_factory=QueueCap)
    trace: bool = True
    schema: str = DEFAULT_SCHEMA

    def __post_init__(self) -> None:  # a bad name fails here, not in the first enqueue
        parse_schema(self.schema, "schema")

    @classmethod
    def from_environ(cls: type[C], environ: Mapping[str, str] | None = None) -> C:
        """Configured by MAILBUS_POLICY_FILE, MAILBUS_QUEUE_CAP, MAILBUS_QUEUE_CAP_SHARES and
        MAILBUS_DB_SCHEMA, read now, once (ConfigError naming a bad one)."""
        env = os.environ if environ is None else environ
        return cls(
            configured_policy_book(environ),
            QueueCap.from_environ(environ),
            schema=parse_schema(env.get("MAILBUS_DB_SCHEMA")),
        )

    def _trace(self) -> TraceContext:
        return current_trace_context() if self.trace else (None, None)


C = TypeVar("C", bound=_Config)


def run(conn: psycopg.Connection[Any], steps: Generator[Statement, Rows, T]) -> T:
    """Drive a flow of :mod:`mailbus_client.steps` on ``conn``; its result."""
    try:
        statement = next(steps)  # a flow with nothing to do (an empty batch) stops at once
        while True:
            statement = steps.send(conn.execute(statement.sql, statement.params).fetchall())
    except StopIteration as done:
        return cast(T, done.value)


async def run_async(conn: psycopg.AsyncConnection[Any], steps: Generator[Statement, Rows, T]) -> T:
    """:func:`run` on an asynchronous connection."""
    try:
        statement = next(steps)
        while True:
            cursor = await conn.execute(statement.sql, statement.params)
            statement = steps.send(await cursor.fetchall())
    except StopIteration as done:
        return cast(T, done.value)


@dataclass(frozen=True)
class Client(_Config):
    """Enqueue, read and cancel mail on a ``psycopg.Connection``, in its transaction."""

    def enqueue(self, conn: psycopg.Connection[Any], request: SendRequest) -> EnqueueResult:
        """Insert ``request`` unless its dedupe key exists (then ``created=False``).
        InvalidSendError before any I/O; QueueFullError past the cap (nothing written, the
        transaction stays usable)."""
        return run(
            conn, enqueue_steps(request, self.policies, self.cap, self._trace(), schema=self.schema)
        )

    def enqueue_many(
        self, conn: psycopg.Connection[Any], requests: Iterable[SendRequest]
    ) -> list[EnqueueResult]:
        """:meth:`enqueue` for many requests in one statement, results in their order;
        every request is checked before anything is written. With a cap, the batch is
        written whole or refused whole."""
        return run(
            conn,
            enqueue_many_steps(
                list(requests), self.policies, self.cap, self._trace(), schema=self.schema
            ),
        )

    def status(self, conn: psycopg.Connection[Any], key: str) -> SendStatus | None:
        """The send with dedupe key ``key`` as it stands, or None when there is none."""
        return run(conn, status_steps(key, self.schema))

    def cancel(self, conn: psycopg.Connection[Any], key: str, *, by: str | None = None) -> bool:
        """Stop the send ``key`` if it is pending and no call was made for it (it becomes
        ``expired``, audited with ``by``, default the database user): True; else False and
        nothing changes. The same guard as ``mailbus send cancel``."""
        return run(conn, cancel_steps(key, by, self.schema))


@dataclass(frozen=True)
class AsyncClient(_Config):
    """:class:`Client` on a ``psycopg.AsyncConnection``."""

    async def enqueue(
        self, conn: psycopg.AsyncConnection[Any], request: SendRequest
    ) -> EnqueueResult:
        return await run_async(
            conn, enqueue_steps(request, self.policies, self.cap, self._trace(), schema=self.schema)
        )

    async def enqueue_many(
        self, conn: psycopg.AsyncConnection[Any], requests: Iterable[SendRequest]
    ) -> list[EnqueueResult]:
        return await run_async(
            conn,
            enqueue_many_steps(
                list(requests), self.policies, self.cap, self._trace(), schema=self.schema
            ),
        )

    async def status(self, conn: psycopg.AsyncConnection[Any], key: str) -> SendStatus | None:
        return await run_async(conn, status_steps(key, self.schema))

    async def cancel(
        self, conn: psycopg.AsyncConnection[Any], key: str, *, by: str | None = None
    ) -> bool:
        return await run_async(conn, cancel_steps(key, by, self.schema))
