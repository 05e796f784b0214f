"""`mailbus migrate` and its marked migrations (docs/runbook.md#upgrades): a locking one is
refused on a database that holds sends until `--allow-locking`, with nothing applied; an
online one builds its index outside a transaction and rebuilds an interrupted build."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from services import StackServices, database_url_for, run_mailbus

from mailbus.app.migrate import apply_migrations, available_migrations
from mailbus.app.scratch_database import drop_database, schema_as_of

pytestmark = pytest.mark.stack

BUILD = available_migrations()[-1].version


def recorded(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT max(version) FROM mailbus_schema_migrations").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def scratch(services: StackServices) -> Iterator[str]:
    name = f"mailbus_locking_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


def test_a_locking_migration_waits_for_allow_locking_on_a_database_with_sends(
    scratch: str,
) -> None:
    schema_as_of(scratch, 16)  # 0017 rebuilds the dedupe key's index under ACCESS EXCLUSIVE
    with psycopg.connect(scratch) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('k', 'a@x.org', 't')"
        )
    env = {"MAILBUS_DATABASE_URL": scratch}
    status = run_mailbus("migrate", "--status", env=env)
    assert "0017_dedupe_key_bytewise (locking)" in status.stdout

    refused = run_mailbus("migrate", "--skip-topics", env=env)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "--allow-locking: 0017_dedupe_key_bytewise, 0019_suppression_scope, 0021" in line
    assert "(nothing was applied)" in line
    assert recorded(scratch) == 16  # nothing applied, not even the migrations before it

    allowed = run_mailbus("migrate", "--skip-topics", "--allow-locking", env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert recorded(scratch) == BUILD


def test_an_online_migration_rebuilds_an_interrupted_index(scratch: str) -> None:
    apply_migrations(scratch)
    with psycopg.connect(scratch, autocommit=True) as conn:
        for key in ("a", "b"):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, 'a@x.org', 't')",
                (key,),
            )
        # an online build interrupted: its index left invalid, its version not recorded
        conn.execute("DROP INDEX email_sends_settled_idx")
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version = 27")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY email_sends_settled_idx ON email_sends (template)"
            )
    assert apply_migrations(scratch) == [27]  # no --allow-locking needed: it is online
    with psycopg.connect(scratch) as conn:
        [(valid, definition)] = conn.execute(
            "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i"
            " WHERE i.indexrelid = 'email_sends_settled_idx'::regclass"
        ).fetchall()
    assert valid
    assert "(updated_at, id) WHERE (status = ANY" in definition


def test_0048_gives_up_on_a_long_transaction_instead_of_queueing_enqueues(scratch: str) -> None:
    """docs/runbook.md#upgrades: behind a transaction that holds email_sends, its ALTER
    TABLE keeps trying with a short lock timeout until ``--max-wait``, then stops with
    nothing of 0048 applied; run again, it applies."""
    apply_migrations(scratch)
    with psycopg.connect(scratch, autocommit=True) as conn:  # the database before 0048
        conn.execute("DROP VIEW email_sends_shown")  # 0052's, which reads 0048's objects
        conn.execute("ALTER TABLE email_sends DROP COLUMN provider_key")
        conn.execute("DROP TABLE email_key_lives")
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version = 48")

    def has_0048() -> bool:
        with psycopg.connect(scratch) as conn:
            found = conn.execute(
                "SELECT to_regclass('email_key_lives') IS NOT NULL,"
                " EXISTS (SELECT FROM mailbus_schema_migrations WHERE version = 48)"
            ).fetchone()
        assert found is not None and found[0] == found[1]
        return bool(found[0])

    env = {"MAILBUS_DATABASE_URL": scratch}
    with psycopg.connect(scratch) as long_transaction:
        long_transaction.execute("SELECT count(*) FROM email_sends")  # holds ACCESS SHARE
        stopped = run_mailbus("migrate", "--skip-topics", "--max-wait", "2", env=env)
        assert stopped.returncode != 0
        assert "did not get its locks" in stopped.stderr, stopped.stderr
        assert not has_0048()
    applied = run_mailbus("migrate", "--skip-topics", env=env)
    assert applied.returncode == 0, applied.stderr
    assert has_0048()
