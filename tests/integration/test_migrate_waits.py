"""`mailbus migrate` behind a long transaction (issue 35, review 2026-12-06 holes 8 and 20):
enqueues go on while it waits, it applies once the transaction ends, a killed `migrate`
leaves no session behind holding the migrators' lock or a place in a lock queue, and a
rerun drops only its own invalid indexes, never a DBA's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from services import REPO, StackServices, database_url_for

from mailbus.app.migrate import apply_migrations, available_migrations
from mailbus.app.scratch_database import drop_database, schema_as_of

pytestmark = pytest.mark.stack

_LOCK_KEY = 0x6D61696C62757301  # the migrators' advisory lock (mailbus/app/migrate.py)
_ENQUEUE = "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES (%s, 'a@x.org', 't')"


@pytest.fixture
def scratch(services: StackServices) -> Iterator[str]:
    name = f"mailbus_waits_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


@pytest.fixture
def behind_a_reader(scratch: str) -> Iterator[tuple[str, psycopg.Connection[tuple[object, ...]]]]:
    """A database where 0039 (``ALTER TABLE email_sends ADD COLUMN``, ACCESS EXCLUSIVE for
    an instant) is pending, and a session idle in a transaction that read email_sends (a
    pg_dump, an analytics query): the ALTER must wait for it."""
    schema_as_of(scratch, 38)
    with psycopg.connect(scratch) as reader:
        reader.execute("SELECT 1 FROM email_sends LIMIT 1")  # ACCESS SHARE until it ends
        yield scratch, reader
        reader.rollback()


def _migrate(url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MAILBUS_DATABASE_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "mailbus", "migrate", "--skip-topics", "--max-wait", "60"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _versions(url: str) -> set[int]:
    with psycopg.connect(url) as conn:
        return {v for (v,) in conn.execute("SELECT version FROM mailbus_schema_migrations")}


def _wait_for_waiting_migrator(url: str) -> None:
    """Until migrate holds the migrators' lock (it then waits for 0039's)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            held = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND objid = %s",
                (_LOCK_KEY & 0xFFFFFFFF,),
            ).fetchone()
            if held == (1,):
                time.sleep(1.0)  # a try or two behind the reader
                return
            time.sleep(0.1)
    raise AssertionError("migrate never took the migrators' lock")


def test_enqueues_go_on_while_migrate_waits_behind_a_long_transaction(
    behind_a_reader: tuple[str, psycopg.Connection[tuple[object, ...]]],
) -> None:
    url, reader = behind_a_reader
    migrate = _migrate(url)
    try:
        _wait_for_waiting_migrator(url)
        # an enqueue that waited for the reader's end would never end while it is open:
        # the statement timeout turns that into a failure instead of a hang
        with psycopg.connect(url, autocommit=True) as writer:
            writer.execute("SET statement_timeout = '5s'")
            for n in range(50):
                writer.execute(_ENQUEUE, (f"during-{n}",))
                time.sleep(0.02)
        assert migrate.poll() is None  # still waiting for its lock
        assert 39 not in _versions(url)
        reader.rollback()  # the long transaction ends: 0039 goes in
        _, err = migrate.communicate(timeout=60)
    finally:
        if migrate.poll() is None:
            migrate.kill()
            migrate.communicate()
    assert migrate.returncode == 0, err
    assert f"0039_trace_context waits for a lock held by pid {reader.info.backend_pid}" in err
    assert max(_versions(url)) == available_migrations()[-1].version


def test_a_killed_migrate_leaves_no_session_behind(
    behind_a_reader: tuple[str, psycopg.Connection[tuple[object, ...]]],
) -> None:
    url, reader = behind_a_reader
    migrate = _migrate(url)
    _wait_for_waiting_migrator(url)
    migrate.send_signal(signal.SIGKILL)  # a Job's deadline, an OOM kill
    migrate.communicate()
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SET statement_timeout = '5s'")
        while other.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_KEY,)).fetchone() != (True,):
            assert time.monotonic() < deadline, "the dead migrate's session holds the lock"
            time.sleep(0.2)
        other.execute(_ENQUEUE, ("after-the-kill",))  # no ALTER left in the lock queue
        other.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    reader.rollback()
    assert 39 not in _versions(url)


def test_a_rerun_drops_only_its_own_invalid_index(scratch: str) -> None:
    apply_migrations(scratch)
    with psycopg.connect(scratch, autocommit=True) as conn:
        for key in ("a", "b"):
            conn.execute(_ENQUEUE, (key,))
        # a DBA's online build that failed (or is still running): invalid, not ours
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY dba_idx ON email_sends (template)")
        # and ours, 0027's, interrupted the same way
        conn.execute("DROP INDEX email_sends_settled_idx")
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version = 27")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY email_sends_settled_idx ON email_sends (template)"
            )
    assert apply_migrations(scratch) == [27]
    with psycopg.connect(scratch) as conn:
        indexes = dict(
            conn.execute(
                "SELECT c.relname, i.indisvalid FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname IN ('dba_idx', 'email_sends_settled_idx')"
            ).fetchall()
        )
    assert indexes == {"dba_idx": False, "email_sends_settled_idx": True}
