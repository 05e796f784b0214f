"""`mailbus migrate`: the numbered SQL migrations in ``schemas/sql`` and the Kafka topics;
with ``--roles`` also the least-privilege group roles of ``schemas/sql/roles/grants.sql``.

Safe to run any number of times and concurrently: every run takes one transaction-level
advisory lock, then applies only the versions not yet recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg

from mailbus.kernel.errors import ConfigError, StorageError

__all__ = ["ROLES", "Migration", "apply_migrations", "apply_roles", "available_migrations"]

_LOCK_KEY = 0x6D61696C62757301  # "mailbus\x01": one lock for all migrators of a database
ROLES = (
    "mailbus_enqueuer",
    "mailbus_relay",
    "mailbus_consumer",
    "mailbus_intake",
    "mailbus_webhooks",
    "mailbus_operator",
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


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


def apply_migrations(database_url: str) -> list[int]:
    """Apply what is missing; return the versions applied by this call."""
    migrations = available_migrations()  # two files with one version: refused before connecting
    try:
        with psycopg.connect(database_url, autocommit=False) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS mailbus_schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM mailbus_schema_migrations")}
            applied = []
            for migration in migrations:
                if migration.version in done:
                    continue
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO mailbus_schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.version)
            conn.commit()
            return applied
    except psycopg.Error as exc:
        raise StorageError(f"migration failed: {exc}") from exc


def apply_roles(database_url: str) -> tuple[str, ...]:
    """Create the group roles (once per cluster) and set their grants in this database to
    exactly those of ``grants.sql``; return the role names. Run after the migrations."""
    sql = resources.files("mailbus.schemas").joinpath("sql", "roles", "grants.sql").read_text()
    try:
        with psycopg.connect(database_url, autocommit=False) as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(sql.encode())
            conn.commit()
    except psycopg.Error as exc:
        raise StorageError(f"roles not applied: {exc}") from exc
    return ROLES
