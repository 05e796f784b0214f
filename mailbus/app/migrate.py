"""`mailbus migrate`: the numbered SQL migrations in ``schemas/sql`` and the Kafka topics;
with ``--roles`` also the least-privilege group roles of ``schemas/sql/roles/grants.sql``.

Safe to run any number of times and concurrently: every run takes one session-level
advisory lock, then applies only the versions not yet recorded, each in its own
transaction with its version row.

Two marker lines, at the start of a line in a migration's file, change how it is applied
(docs/runbook.md#upgrades):

- ``-- mailbus: online``: the file's statements cannot run inside a transaction
  (``CREATE INDEX CONCURRENTLY``); each (ending with ``;`` at the end of a line) runs
  alone, in order, and the version is recorded after the last. Each must be idempotent
  (``IF NOT EXISTS``): a rerun after an interruption runs them all again.
  An invalid index (the leftover of an online build that was interrupted) is dropped
  first, so a rerun builds it again.
- ``-- mailbus: locking``: it holds a lock that stops writes to a table for as long as it
  runs. On a database that already holds sends, ``migrate`` refuses to apply it (exit 2,
  nothing applied) unless ``--allow-locking`` is given; a new database takes it at once.

Every other command first compares the database's recorded versions with the build's
(:func:`check_schema`): a database behind the build is refused with one line that says to
run ``mailbus migrate``, never left to fail later on a missing table. A database ahead of
the build (new pods migrated it, old pods still run during a rollout) is fine: migrations
only add.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg

from mailbus.kernel.errors import ConfigError, StorageError

__all__ = [
    "ROLES",
    "Migration",
    "SchemaState",
    "apply_migrations",
    "apply_roles",
    "available_migrations",
    "check_schema",
    "schema_state",
    "statements",
]

_LOCK_KEY = 0x6D61696C62757301  # "mailbus\x01": one lock for all migrators of a database
_LOCK_POLL_S = 0.2
_ONLINE = "-- mailbus: online"
_LOCKING = "-- mailbus: locking"
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
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def online(self) -> bool:
        """Runs outside a transaction (CREATE INDEX CONCURRENTLY), a statement at a time."""
        return _marked(self.sql, _ONLINE)

    @property
    def locking(self) -> bool:
        """Stops writes to a table while it runs: needs --allow-locking on a live database."""
        return _marked(self.sql, _LOCKING)


def _marked(sql: str, marker: str) -> bool:
    return any(line.startswith(marker) for line in sql.splitlines())


def statements(sql: str) -> list[str]:
    """An online migration's statements: each ends with ``;`` at the end of a line (pure).
    Comment lines are dropped; a last statement without ``;`` is kept."""
    found, lines = [], []
    for line in sql.splitlines():
        if line.lstrip().startswith("--"):
            continue
        lines.append(line)
        if line.rstrip().endswith(";"):
            found.append("\n".join(lines).strip())
            lines = []
    rest = "\n".join(lines).strip()
    return [s for s in [*found, rest] if s]


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
        if not self.pending:
            return None
        return (
            f"database at {self.database_version}, this build needs {self.build_version}:"
            " run `mailbus migrate`"
        )


def available_migrations(directory: Traversable | None = None) -> list[Migration]:
    """The migrations in ``directory`` (default: those shipped in ``schemas/sql``), ordered
    by version (``0001_name.sql``). Two files with one version (two branches that each
    added the next number) raise ConfigError: a database that recorded the version with
    one of them would skip the other."""
    if directory is None:
        directory = resources.files("mailbus.schemas").joinpath("sql")
    files: dict[int, str] = {}  # version → file name
    found = []
    for entry in sorted(directory.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            prefix, _, rest = entry.name.partition("_")
            version = int(prefix)
            if version in files:
                raise ConfigError(
                    str(directory),
                    f"migrations {files[version]} and {entry.name} share version {version}:"
                    " renumber one",
                )
            files[version] = entry.name
            found.append(Migration(version, rest.removesuffix(".sql"), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


def apply_migrations(database_url: str, *, allow_locking: bool = False) -> list[int]:
    """Apply what is missing; return the versions applied by this call. A pending locking
    migration on a database that holds sends raises ConfigError (``--allow-locking``)
    before anything is applied."""
    migrations = available_migrations()  # two files with one version: refused before connecting
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            _lock(conn)
            try:
                return _apply_pending(conn, migrations, allow_locking)
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
    conn: psycopg.Connection[tuple[object, ...]], migrations: list[Migration], allow_locking: bool
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
        if migration.online:
            _drop_invalid_indexes(conn)
            for statement in statements(migration.sql):
                conn.execute(statement.encode())
            _record(conn, migration)
        else:
            with conn.transaction():
                conn.execute(migration.sql.encode())
                _record(conn, migration)
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


def _drop_invalid_indexes(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """An online build that was interrupted leaves its index invalid (never used, still
    maintained); under the migrators' lock no other build is running, so drop it."""
    rows = conn.execute(
        "SELECT format('%I', c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE NOT i.indisvalid AND n.nspname = current_schema()"
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


def check_schema(database_url: str) -> None:
    """Raise ConfigError when the database is behind this build. A database that cannot be
    reached now is not judged: the process starts and waits for it as it always did."""
    try:
        state = schema_state(database_url, connect_timeout=5)
    except psycopg.OperationalError:
        return
    reason = state.behind()
    if reason is not None:
        raise ConfigError("MAILBUS_DATABASE_URL", reason)


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
