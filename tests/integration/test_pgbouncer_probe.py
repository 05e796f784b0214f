"""The readiness probe's statement timeout holds through PgBouncer (docs/guides/pgbouncer.md):
PgBouncer 1.18 drops the ``options`` startup parameter, so the probe sets the timeout in
its own transaction. A probe whose statement waits (here the schema guard's read of the
migration table, locked by a migration) answers "not ready" within its timeout instead
of hanging with it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from pgbouncer import PgBouncer

from mailbus.app.database_probe import database_probe
from mailbus.app.migration_files import available_migrations
from mailbus.kernel import schema_guard

POOL = 3  # the fixture's default_pool_size


@pytest.fixture
def guard_armed() -> Iterator[None]:
    schema_guard.arm((m.version for m in available_migrations()), stop=lambda: None)
    yield
    schema_guard.disarm()


def test_the_probe_gives_up_within_its_timeout_through_pgbouncer(
    database_url: str, pgbouncer: PgBouncer, guard_armed: None
) -> None:
    probe = database_probe(pgbouncer.url, timeout_s=1.0)
    assert probe() == (True, "")
    with psycopg.connect(database_url) as migration, ThreadPoolExecutor(1) as pool:
        migration.execute("LOCK TABLE mailbus_schema_migrations IN ACCESS EXCLUSIVE MODE")
        answer = pool.submit(probe)
        try:
            ready, reason = answer.result(timeout=10)
        finally:
            migration.rollback()  # a probe still waiting returns now
    assert not ready and "statement timeout" in reason
    assert probe() == (True, "")


def test_the_probe_gives_up_within_its_timeout_while_every_server_session_is_busy(
    pgbouncer: PgBouncer,
) -> None:
    """PgBouncer holds a statement until one of its pool's server sessions is free (for up
    to its query_wait_timeout, 120 s): no statement_timeout counts it, as it has not
    reached PostgreSQL. The probe answers "not ready" within its timeout all the same."""
    probe = database_probe(pgbouncer.url, timeout_s=1.0)
    assert probe() == (True, "")
    busy = [psycopg.connect(pgbouncer.url) for _ in range(POOL)]
    try:
        for session in busy:
            session.execute("SELECT 1")  # its transaction holds a server session
        with ThreadPoolExecutor(1) as pool:
            answers = [pool.submit(probe).result(timeout=10) for _ in range(2)]
    finally:
        for session in busy:
            session.rollback()
            session.close()
    assert [ready for ready, _ in answers] == [False, False]
    assert "no answer within" in answers[0][1]
    assert probe() == (True, "")
