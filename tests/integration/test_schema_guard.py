"""The schema guard judges each new connection of a long-running process
(mailbus/kernel/schema_guard.py) on the real PostgreSQL: a database behind the build closes
the connection, stops the process once and makes it unready; one at the build's schema is
handed on idle, as a pool requires of its ``configure``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from mailbus.app.migration_files import available_migrations
from mailbus.kernel import health, schema_guard

pytestmark = pytest.mark.stack

BUILD = [m.version for m in available_migrations()]


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """How often the guard stopped this process (as SIGTERM would) while armed."""
    monkeypatch.setattr(health, "_components", {})  # this process's readiness, for this test
    stopped: list[str] = []
    yield stopped
    schema_guard.disarm()


def test_a_connection_to_a_database_behind_the_build_is_closed_and_stops_the_process_once(
    database_url: str, stops: list[str]
) -> None:
    ahead = BUILD[-1] + 1  # a build that ships one migration more than the database holds
    schema_guard.arm([*BUILD, ahead], stop=lambda: stops.append("stop"))
    want = f"database at {BUILD[-1]}, this build needs {ahead}: run `mailbus migrate`"
    for _ in range(2):  # the pool's next try, another room's reconnect
        conn = psycopg.connect(database_url, autocommit=True)
        with pytest.raises(schema_guard.SchemaBehind, match="run `mailbus migrate`"):
            schema_guard.check(conn)
        assert conn.closed  # nothing is claimed on it
    assert stops == ["stop"]
    assert schema_guard.tripped() == want
    ready, states = health.readiness()
    assert not ready
    assert states["schema"] == {"ready": False, "detail": want}


def test_a_database_without_the_versions_table_is_at_0(database_url: str, stops: list[str]) -> None:
    """A database restored from before the first migration."""
    with psycopg.connect(database_url) as conn:
        conn.execute("DROP TABLE mailbus_schema_migrations")
    schema_guard.arm(BUILD, stop=lambda: stops.append("stop"))
    want = f"database at 0, this build needs {BUILD[-1]}"
    with (
        psycopg.connect(database_url) as conn,
        pytest.raises(schema_guard.SchemaBehind, match=want),
    ):
        schema_guard.check(conn)
    assert stops == ["stop"]


def test_a_database_at_the_build_passes_and_the_connection_is_left_idle(
    database_url: str, stops: list[str]
) -> None:
    schema_guard.arm(BUILD, stop=lambda: stops.append("stop"))
    for autocommit in (True, False):
        with psycopg.connect(database_url, autocommit=autocommit, row_factory=dict_row) as conn:
            schema_guard.check(conn)  # the console reads dicts
            assert conn.info.transaction_status == TransactionStatus.IDLE
    with (
        ConnectionPool(database_url, min_size=1, configure=schema_guard.check) as pool,
        pool.connection(timeout=10) as conn,
    ):
        assert conn.execute("SELECT 1").fetchone() == (1,)

    async def through_async_pool() -> object:
        pool = AsyncConnectionPool(
            database_url, min_size=1, open=False, configure=schema_guard.check_async
        )
        await pool.open(wait=True, timeout=10)
        try:
            async with pool.connection() as conn:
                cursor = await conn.execute("SELECT 1")
                return await cursor.fetchone()
        finally:
            await pool.close()

    assert asyncio.run(through_async_pool()) == (1,)
    assert stops == []
    assert schema_guard.tripped() is None


def test_an_unarmed_process_is_not_checked(database_url: str) -> None:
    schema_guard.disarm()
    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM mailbus_schema_migrations")
        conn.commit()
        schema_guard.check(conn)  # a one-shot command: judged at start only
        assert not conn.closed
