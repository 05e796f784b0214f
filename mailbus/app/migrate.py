"""`mailbus migrate`: the numbered SQL migrations in ``schemas/sql`` and the Kafka topics;
with ``--roles`` also the least-privilege group roles of ``schemas/sql/roles/grants.sql``.

Safe to run any number of times and concurrently: every run takes one session-level
advisory lock, then applies only the versions not yet recorded, each in its own
transaction with its version row (an online one a statement at a time; the markers are
read in :mod:`mailbus.app.migration_files`).

Never behind a long transaction with writers queued behind it (docs/runbook.md#upgrades):
each try of a file waits at most :attr:`LockWait.lock_timeout_s` for each lock it needs
(PostgreSQL's ``lock_timeout``), so an ``ALTER TABLE`` that must wait for an open
transaction holds the inserts queued behind its request for no longer than that; then it
gives up, backs off (jittered, doubling up to ``cap_s``) and tries again, for up to
``max_wait_s``, naming the transactions it waits for. The session is the server's to end
when its client goes: ``client_connection_check_interval`` cancels a statement whose
client is gone and TCP keepalives find a vanished host, so a killed ``migrate`` leaves no
session behind holding the advisory lock or waiting in a lock queue.

Every other command first compares the database's recorded versions with the build's
(:func:`check_schema`): a database behind the build is refused with one line that says to
run ``mailbus migrate``, never left to fail later on a missing table. A database ahead of
the build (new pods migrated it, old pods still run during a rollout) is fine: migrations
only add.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import psycopg

from mailbus.app.migrate_waits import LockWait, LockWaiter, retry_delay
from mailbus.app.migration_files import Migration, available_migrations, statements
from mailbus.kernel.errors import ConfigError, StorageError
from mailbus.kernel.schema_version import behind

__all__ = [
    "ROLES",
    "LockWait",
    "Migration",
    "SchemaState",
    "apply_migrations",
    "apply_roles",
    "available_migrations",
    "check_schema",
    "retry_delay",
    "schema_state",
    "statements",
]

log = logging.getLogger(__name__)

_LOCK_KEY = 0x6D61696C62757301  # "mailbus\x01": one lock for all migrators of a database
_LOCK_POLL_S = 0.2
_APPLICATION = "mailbus migrate"
# the server ends the session when its client is gone: a dead client's statement is
# cancelled within a second, a vanished host's connection dropped within ~25 s
_SESSION = (
    "SET client_connection_check_interval = '1s'",
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
)
ROLES = (
    "mailbus_enqueuer",
    "mailbus_relay",
    "mailbus_consumer",
    "mailbus_intake",
    "mailbus_webhooks",
    "mailbus_operator",
    "mailbus_retention",
    "mailbus_console",
)


@dataclass(frozen=True)
class SchemaState:
    """What a database recorded against what this build ships."""

    applied: tuple[int, ...]
    pending: tuple[Migration, ...]
    build_version: int

    @property
    def database_version(self) -> int:
        return max(self.applied, default=0)

    def behind(self) -> str | None:
        """Why a process of this build must not run here, or None."""
        return behind(self.database_version, self.build_version, len(self.pending))


def apply_migrations(
    database_url: str,
    *,
    allow_locking: bool = False,
    wait: LockWait | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> list[int]:
    """Apply what is missing; return the versions applied by this call. A pending locking
    migration on a database that holds sends raises ConfigError (``--allow-locking``)
    before anything is applied; one that could not take its locks within
    ``wait.max_wait_s`` raises StorageError, the versions before it applied."""
    migrations = available_migrations()  # two files with one version: refused before connecting
    try:
        with psycopg.connect(database_url, autocommit=True, application_name=_APPLICATION) as conn:
            for setting in _SESSION:
                conn.execute(setting)
            _lock(conn)
            try:
                return _apply_pending(
                    conn,
                    migrations,
                    allow_locking,
                    LockWaiter(wait or LockWait(), sleep, clock, rand),
                )
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    except psycopg.Error as exc:
        raise StorageError(f"migration failed: {exc}") from exc


def _lock(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Wait for the migrators' lock by polling: a migrator blocked inside one statement
    would hold a snapshot that an online index build of the lock's holder waits for."""
    while conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_KEY,)).fetchone() != (True,):
        time.sleep(_LOCK_POLL_S)


def _apply_pending(
    conn: psycopg.Connection[tuple[object, ...]],
    migrations: list[Migration],
    allow_locking: bool,
    waiter: LockWaiter,
) -> list[int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS mailbus_schema_migrations ("
        " version int PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM mailbus_schema_migrations")}
    pending = [m for m in migrations if m.version not in done]
    locking = [m.label for m in pending if m.locking]
    if locking and not allow_locking and _holds_sends(conn):
        raise ConfigError(
            "--allow-locking",
            f"{', '.join(locking)} stops writes to its table while it runs, and this database"
            " holds sends: run it when writes may wait, with --allow-locking"
            " (nothing was applied)",
        )
    applied = []
    for migration in pending:
        if migration.online:  # never blocks writers: no lock timeout, it waits its turn
            _drop_invalid_indexes(conn, migration.index_names)
            for statement in statements(migration.sql):
                conn.execute(statement.encode())
            _record(conn, migration)
        else:

            def apply(migration: Migration = migration) -> None:
                conn.execute(migration.sql.encode())
                _record(conn, migration)

            waiter.run(conn, migration.label, apply)
        applied.append(migration.version)
    return applied


def _record(conn: psycopg.Connection[tuple[object, ...]], migration: Migration) -> None:
    conn.execute(
        "INSERT INTO mailbus_schema_migrations (version, name) VALUES (%s, %s)",
        (migration.version, migration.name),
    )


def _holds_sends(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    if conn.execute("SELECT to_regclass('email_sends')").fetchone() == (None,):
        return False
    return conn.execute("SELECT EXISTS (SELECT FROM email_sends)").fetchone() == (True,)


def _drop_invalid_indexes(
    conn: psycopg.Connection[tuple[object, ...]], names: tuple[str, ...]
) -> None:
    """An online build that was interrupted leaves its index invalid (never used, still
    maintained): drop it, so the rerun builds it again. Only the indexes this migration
    builds: another invalid index may be a DBA's build still running."""
    rows = conn.execute(
        "SELECT format('%%I', c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE NOT i.indisvalid AND n.nspname = current_schema() AND c.relname = ANY(%s)",
        (list(names),),
    ).fetchall()
    for (name,) in rows:
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}".encode())


def schema_state(database_url: str, connect_timeout: float = 10) -> SchemaState:
    """The versions ``database_url`` recorded (none on a database never migrated) and the
    shipped migrations it has not. Raises psycopg's OperationalError when the database
    cannot be reached, StorageError when it refuses the read."""
    migrations = available_migrations()
    with psycopg.connect(database_url, connect_timeout=int(connect_timeout)) as conn:
        try:
            if conn.execute("SELECT to_regclass('mailbus_schema_migrations')").fetchone() == (
                None,
            ):
                applied: set[int] = set()
            else:
                rows = conn.execute("SELECT version FROM mailbus_schema_migrations")
                applied = {version for (version,) in rows}
        except psycopg.Error as exc:
            raise StorageError(f"cannot read mailbus_schema_migrations: {exc}") from exc
    return SchemaState(
        applied=tuple(sorted(applied)),
        pending=tuple(m for m in migrations if m.version not in applied),
        build_version=max((m.version for m in migrations), default=0),
    )


def check_schema(database_url: str, until: threading.Event | None = None) -> bool:
    """Raise ConfigError when the database is behind this build. A long-running process
    (``until``: its stop event) waits for a database that cannot be reached yet, trying
    again with backoff, and is judged once it answers; False if it was stopped meanwhile.
    A command (no ``until``) is not judged on a database it cannot reach: its own first
    statement says so."""
    delay = 1.0
    while True:
        try:
            state = schema_state(database_url, connect_timeout=5)
            break
        except psycopg.OperationalError as exc:
            if until is None:
                return True
            log.warning(
                "database unreachable, the schema check tries again in %.0f s: %s",
                delay,
                str(exc).strip().splitlines()[0] if str(exc).strip() else exc,
            )
            if until.wait(delay):
                return False
            delay = min(delay * 2, 30.0)
    reason = state.behind()
    if reason is not None:
        raise ConfigError("MAILBUS_DATABASE_URL", reason)
    return True


def apply_roles(database_url: str) -> tuple[str, ...]:
    """Create the group roles (once per cluster) and set their grants in this database to
    exactly those of ``grants.sql``; return the role names. Run after the migrations."""
    sql = resources.files("mailbus.schemas").joinpath("sql", "roles", "grants.sql").read_text()
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            _lock(conn)
            try:
                with conn.transaction():
                    conn.execute(sql.encode())
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    except psycopg.Error as exc:
        raise StorageError(f"roles not applied: {exc}") from exc
    return ROLES
