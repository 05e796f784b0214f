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

Everything lands in the schema MAILBUS_DB_SCHEMA (mailbus/kernel/db_schema.py): the run
creates it when missing and applies each migration with the session's ``search_path`` set
to it, so the migrations' unqualified names are the schema's. An install from before the
schema (``public.mailbus_schema_migrations``, none in the schema) is applied the rest of its
older migrations in ``public``, as they always were, then moved by migration 0072.
Every function of the schema (trigger functions too: a trigger runs under the path of the
session that writes, an application's) is pinned to ``<schema>, pg_temp`` by the run, in
each migration's transaction (never one in ``public``, which may be the application's): a
migration creates its functions ``SET search_path FROM CURRENT`` and never names the
schema.

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
from psycopg import sql

from mailbus.app.migrate_waits import LockWait, LockWaiter, retry_delay
from mailbus.app.migration_files import Migration, available_migrations, statements
from mailbus.kernel.db_schema import DEFAULT_SCHEMA, search_path
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
    "pin_functions",
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
MOVED_FROM_PUBLIC = 72  # 0072_own_schema.sql moves an install from before the schema


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
    schema: str = DEFAULT_SCHEMA,
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
                _create_schema(conn, schema)
                return _apply_pending(
                    conn,
                    schema,
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


def _create_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """The schema, created when missing (by a role that may create one in the database; a
    schema a DBA created beforehand needs no such right)."""
    if conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone() == (None,):
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def _use_path(conn: psycopg.Connection[tuple[object, ...]], path: str) -> None:
    conn.execute(sql.SQL("SET search_path = {}").format(sql.SQL(path)))


def _apply_pending(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    migrations: list[Migration],
    allow_locking: bool,
    waiter: LockWaiter,
) -> list[int]:
    in_public = _migrations_schema(conn, schema) == "public"  # an install from before 0072
    own_path = search_path(sql.Identifier(schema).as_string(conn))
    # public's older migrations: their functions' `SET search_path FROM CURRENT` is then
    # what releases before the schema pinned, pg_temp last, should 0072 never come
    _use_path(conn, "public, pg_temp" if in_public else own_path)
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
        if in_public and migration.version >= MOVED_FROM_PUBLIC:
            _use_path(conn, own_path)  # 0072 moves everything, the migration table too
            in_public = False
        pin = not in_public  # public's functions may be the application's: never touched
        if migration.online:  # never blocks writers: no lock timeout, it waits its turn
            _drop_invalid_indexes(conn, migration.index_names)
            for statement in statements(migration.sql):
                conn.execute(statement.encode())
            _record(conn, migration, pin)
        else:

            def apply(migration: Migration = migration, pin: bool = pin) -> None:
                conn.execute(migration.sql.encode())
                _record(conn, migration, pin)

            waiter.run(conn, migration.label, apply)
        applied.append(migration.version)
    return applied


# the functions of the session's schema (an extension's own excepted) not yet pinned to it
_UNPINNED = """
SELECT format('ALTER FUNCTION %s SET search_path = %I, pg_temp', p.oid::regprocedure, n.nspname)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.prokind = 'f'
  AND NOT format('search_path=%I, pg_temp', n.nspname) = ANY(coalesce(p.proconfig, '{}'))
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                  AND d.objid = p.oid AND d.deptype = 'e')
"""


def pin_functions(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Pin every function of the schema to it: a caller's path (an application's, its
    temporary tables) never decides which table a function or trigger reads."""
    for (statement,) in conn.execute(_UNPINNED).fetchall():
        conn.execute(str(statement).encode())


def _record(conn: psycopg.Connection[tuple[object, ...]], migration: Migration, pin: bool) -> None:
    """Pin the schema's functions (``pin``) and record ``migration`` as applied."""
    if pin:
        pin_functions(conn)
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


def _migrations_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> str | None:
    """Where the versions are recorded: ``schema``, else ``public`` (an install from before
    the schema), else None (never migrated). ConfigError when both hold them: a release
    from before the schema migrated a second install into public after the move, and the
    sends written there since are not in the schema's tables."""
    places = [
        str(name)
        for (name,) in conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relname = 'mailbus_schema_migrations' AND n.nspname IN (%s, 'public')"
            " ORDER BY n.nspname = 'public'",
            (schema,),
        )
    ]
    if len(places) > 1:
        raise ConfigError(
            "MAILBUS_DB_SCHEMA",
            f"both {schema}.mailbus_schema_migrations and public.mailbus_schema_migrations"
            f" exist: a release from before the schema migrated public again after migration"
            f" {MOVED_FROM_PUBLIC:04d} moved mailbus into {schema}, and the sends written to"
            " public's tables since are not in the schema's (docs/upgrading.md, its"
            " section on the schema)",
        )
    return places[0] if places else None


def schema_state(
    database_url: str, connect_timeout: float = 10, schema: str = DEFAULT_SCHEMA
) -> SchemaState:
    """The versions ``database_url`` recorded (none on a database never migrated) and the
    shipped migrations it has not. Raises psycopg's OperationalError when the database
    cannot be reached, StorageError when it refuses the read."""
    migrations = available_migrations()
    with psycopg.connect(database_url, connect_timeout=int(connect_timeout)) as conn:
        try:
            where = _migrations_schema(conn, schema)
            applied: set[int] = set()
            if where is not None:
                rows = conn.execute(
                    sql.SQL("SELECT version FROM {}.mailbus_schema_migrations").format(
                        sql.Identifier(where)
                    )
                )
                applied = {version for (version,) in rows}
        except psycopg.Error as exc:
            raise StorageError(f"cannot read mailbus_schema_migrations: {exc}") from exc
    return SchemaState(
        applied=tuple(sorted(applied)),
        pending=tuple(m for m in migrations if m.version not in applied),
        build_version=max((m.version for m in migrations), default=0),
    )


def check_schema(
    database_url: str, until: threading.Event | None = None, schema: str = DEFAULT_SCHEMA
) -> bool:
    """Raise ConfigError when the database is behind this build. A long-running process
    (``until``: its stop event) waits for a database that cannot be reached yet, trying
    again with backoff, and is judged once it answers; False if it was stopped meanwhile.
    A command (no ``until``) is not judged on a database it cannot reach: its own first
    statement says so."""
    delay = 1.0
    while True:
        try:
            state = schema_state(database_url, connect_timeout=5, schema=schema)
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


def apply_roles(database_url: str, schema: str = DEFAULT_SCHEMA) -> tuple[str, ...]:
    """Create the group roles (once per cluster) and set their grants in this database to
    exactly those of ``grants.sql``, all in ``schema``; return the role names. Run after
    the migrations."""
    grants = resources.files("mailbus.schemas").joinpath("sql", "roles", "grants.sql").read_text()
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            _lock(conn)
            try:
                _use_path(conn, search_path(sql.Identifier(schema).as_string(conn)))
                with conn.transaction():
                    conn.execute(grants.encode())
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    except psycopg.Error as exc:
        raise StorageError(f"roles not applied: {exc}") from exc
    return ROLES
