"""The schema guard on every new database connection of a long-running process.

The start-up check (mailbus/app/migrate.py) judges the database a process meets first. A
process that runs for weeks reconnects: to a database restored from an older backup, to a
replica behind its build that a failover promoted. Each room's connection factory (its
pool's ``configure``, or the line after its ``psycopg.connect``) passes every new
connection to :func:`check` (:func:`check_async`): one query, and a schema behind the build

- closes that connection and raises :class:`SchemaBehind`, an ``OperationalError``: the
  room's reconnect path treats it as a database it cannot use yet, so nothing is claimed
  on it;
- once per process: logs the reason, makes ``/readyz`` false (component ``schema``) and
  stops the process as SIGTERM does (what is in flight settles or is left to the
  reconciler); the command line then exits 2 with the start-up check's message.

A process the command line did not :func:`arm` (a room built in a test, a one-shot
command) is not checked.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from mailbus.kernel import health
from mailbus.kernel.db_schema import DEFAULT_SCHEMA
from mailbus.kernel.schema_version import behind

__all__ = ["SchemaBehind", "arm", "check", "check_async", "disarm", "tripped"]

log = logging.getLogger(__name__)

_QUERY = (
    "SELECT count(*) FILTER (WHERE version = ANY(%(build)s)), coalesce(max(version), 0)"
    " FROM {}.mailbus_schema_migrations"
)


class SchemaBehind(psycopg.OperationalError):
    """The new connection's database is behind this build; the connection is closed."""


@dataclass
class _Guard:
    build: tuple[int, ...]
    stop: Callable[[], None]
    query: sql.Composed
    reason: str | None = None


_lock = threading.Lock()
_guard: _Guard | None = None


def _terminate() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def arm(
    build_versions: Iterable[int],
    stop: Callable[[], None] = _terminate,
    schema: str = DEFAULT_SCHEMA,
) -> None:
    """Check every new connection from now on against ``build_versions`` (the migrations
    this build ships) recorded in ``schema``; ``stop``: how the process is stopped
    (SIGTERM to itself)."""
    global _guard
    query = sql.SQL(_QUERY).format(sql.Identifier(schema))
    with _lock:
        _guard = _Guard(tuple(sorted(build_versions)), stop, query)


def disarm() -> None:
    """Check no connection any more (the command line, once its command returned)."""
    global _guard
    with _lock:
        _guard = None


def tripped() -> str | None:
    """Why the guard stopped this process (the start-up check's words), or None."""
    guard = _guard
    return None if guard is None else guard.reason


def check(conn: psycopg.Connection[Any]) -> None:
    """Judge a new connection; raise :class:`SchemaBehind` (the connection closed) when its
    database is behind the build. Leaves the connection idle, as a pool requires."""
    guard = _guard
    if guard is None:
        return
    try:
        with conn.cursor(row_factory=tuple_row) as cursor:  # whatever rows the room reads
            row = cursor.execute(guard.query, {"build": list(guard.build)}).fetchone()
    except (errors.UndefinedTable, errors.InvalidSchemaName):  # before any migration
        row = (0, 0)
    finally:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            conn.rollback()
    reason = _judge(guard, row)
    if reason is not None:
        conn.close()
        raise SchemaBehind(reason)


async def check_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`check` for an asyncio connection."""
    guard = _guard
    if guard is None:
        return
    try:
        async with conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(guard.query, {"build": list(guard.build)})
            row = await cursor.fetchone()
    except (errors.UndefinedTable, errors.InvalidSchemaName):
        row = (0, 0)
    finally:
        if conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()
    reason = _judge(guard, row)
    if reason is not None:
        await conn.close()
        raise SchemaBehind(reason)


def _judge(guard: _Guard, row: tuple[Any, ...] | None) -> str | None:
    applied, database_version = row if row is not None else (0, 0)
    build_version = guard.build[-1] if guard.build else 0
    reason = behind(int(database_version), build_version, len(guard.build) - int(applied))
    if reason is None:
        return None
    with _lock:
        first = guard.reason is None
        if first:
            guard.reason = reason
    if first:
        log.error(
            "a new database connection found the schema behind this build, stopping: %s", reason
        )
        health.mark("schema", False, reason)
        guard.stop()
    return reason
