"""Every migration that would stop writes for longer than an instant is marked ``locking``
(issue 35, review 2026-12-06 hole 9), found by what PostgreSQL says it did rather than by
reading the SQL.

Each file runs, in order, against a database whose tables all hold rows, in one
transaction; before it commits, the test asks PostgreSQL which locks the transaction holds
and what it read. A file that holds a lock stopping inserts into a table that existed
before it (SHARE or stronger), and that scanned, rewrote or indexed that table's rows
meanwhile, blocks every insert for as long as that work takes: more than 100 ms once the
table is big enough, whatever its size here. So it must be marked ``locking`` (and be
refused on a live database without ``--allow-locking``). Catalog-only changes (a nullable
column, a new table, a view, a NOT VALID constraint) take their lock for an instant, and
`mailbus migrate` takes it with a lock timeout (tests/integration/test_migrate_waits.py).
Online files may only build indexes concurrently (or create an extension).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from services import StackServices, database_url_for

from mailbus.app.migrate import available_migrations, statements
from mailbus.app.scratch_database import drop_database

pytestmark = pytest.mark.stack

# the modes that conflict with ROW EXCLUSIVE, the lock every INSERT/UPDATE/DELETE takes
_STOPS_WRITES = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
# a row in each table, as the migration that creates it defines it
_SEEDS = {
    "email_sends": "INSERT INTO email_sends (dedupe_key, to_address, template)"
    " SELECT 'seed-' || g, 'a@x.org', 't' FROM generate_series(1, 20) g",
    "email_suppressions": "INSERT INTO email_suppressions (address) VALUES ('s@x.org')",
    "email_dead_letters": "INSERT INTO email_dead_letters (send_id, reason)"
    " SELECT min(id), 'rejected' FROM email_sends",
    "email_attempts": "INSERT INTO email_attempts (send_id, attempt, outcome)"
    " SELECT min(id), 1, 'accepted' FROM email_sends",
    "email_replays": "INSERT INTO email_replays (dead_letter_id, replayed_by, reason)"
    " SELECT min(id), 'ana', 'test' FROM email_dead_letters",
    "delivery_events": "INSERT INTO delivery_events (provider, event_id, type, message_id,"
    " occurred_at, matched) VALUES ('sandbox', 'e1', 'delivered', 'm1', now(), false)",
    "campaigns": "INSERT INTO campaigns (name, template, rate_per_min) VALUES ('c', 't', 60)",
    "campaign_recipients": "INSERT INTO campaign_recipients (campaign_id, ordinal, user_id,"
    " email) SELECT min(id), 1, 'u1', 'r@x.org' FROM campaigns",
    "email_send_events": "INSERT INTO email_send_events (send_id, dedupe_key, template, event,"
    " status, occurred_at) VALUES (1, 'seed-1', 't', 'accepted', 'accepted', now())",
    "email_send_resolutions": "INSERT INTO email_send_resolutions (send_id, action,"
    " from_status, resolved_by) SELECT min(id), 'accepted', 'unknown', 'ana' FROM email_sends",
    "console_audit": "INSERT INTO console_audit (who, role, action)"
    " VALUES ('ana', 'operator', 'login')",
}
_HELD = """
SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND l.granted AND c.relkind IN ('r', 'p')
  AND c.relname = ANY(%(before)s) AND l.mode = ANY(%(modes)s)
"""
# rows this backend read from each table, counted since its last report of statistics: a
# difference inside one transaction is what that transaction read
_READ = """
SELECT c.relname, pg_stat_get_xact_tuples_returned(c.oid) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'
"""
_TABLES = """
SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'
"""


@pytest.fixture
def scratch(services: StackServices) -> Iterator[str]:
    name = f"mailbus_locks_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


def _blocks_writers(conn: psycopg.Connection[tuple[object, ...]], sql: str) -> list[str]:
    """Run ``sql`` in a transaction (committed): the tables that existed before it which it
    held under a lock that stops writes while it read or rewrote their rows."""
    before = dict(conn.execute(_TABLES).fetchall())
    with conn.transaction():
        read_before = dict(conn.execute(_READ).fetchall())
        conn.execute(sql.encode())
        held = conn.execute(
            _HELD, {"before": list(before), "modes": list(_STOPS_WRITES)}
        ).fetchall()
        after = dict(conn.execute(_TABLES).fetchall())
        read = {t: n - read_before.get(t, 0) for t, n in conn.execute(_READ).fetchall()}
    found = set()
    for table, mode in held:
        if after.get(table) != before[table]:
            found.add(f"{table} ({mode}: rewritten)")
        elif read.get(table, 0) > 0:
            found.add(f"{table} ({mode}: {read[table]} rows read)")
    return sorted(found)


def _seed_new_tables(conn: psycopg.Connection[tuple[object, ...]], seeded: set[str]) -> None:
    present = {table for (table, _) in conn.execute(_TABLES).fetchall()}
    for table, seed in _SEEDS.items():  # in the order of their foreign keys
        if table in present and table not in seeded:
            seeded.add(table)
            conn.execute(seed.encode())


def test_every_migration_that_stops_writes_while_it_works_is_marked_locking(
    scratch: str,
) -> None:
    unmarked: dict[str, list[str]] = {}
    seeded: set[str] = set()
    with psycopg.connect(scratch, autocommit=True) as conn:
        for migration in available_migrations():
            if migration.online:
                for statement in statements(migration.sql):
                    assert re.match(
                        r"CREATE (UNIQUE )?INDEX CONCURRENTLY |CREATE EXTENSION ", statement
                    ), (migration.label, statement)
                    conn.execute(statement.encode())
            else:
                blocking = _blocks_writers(conn, migration.sql)
                if blocking and not migration.locking:
                    unmarked[migration.label] = blocking
            _seed_new_tables(conn, seeded)
    assert set(_SEEDS) <= seeded  # every table held rows when a later file ran
    assert unmarked == {}, "\n".join(f"{k}: {v}" for k, v in unmarked.items())
