"""The numbered SQL migrations in ``schemas/sql`` as values: their versions, their markers
and their statements (pure, no database).

Two marker lines, at the start of a line in a migration's file, change how it is applied
(docs/runbook.md#upgrades):

- ``-- mailbus: online``: the file's statements cannot run inside a transaction
  (``CREATE INDEX CONCURRENTLY``); each (ending with ``;`` at the end of a line) runs
  alone, in order, and the version is recorded after the last. Each must be idempotent
  (``IF NOT EXISTS``): a rerun after an interruption runs them all again. The indexes it
  builds (:attr:`Migration.index_names`) are the only ones a rerun drops when invalid.
- ``-- mailbus: locking``: it does work proportional to a table's rows (a scan, a rewrite,
  an index build) under a lock that stops writes to that table, for as long as it runs
  (tests/integration/test_migration_locks.py finds every such file). On a database that
  already holds sends, ``migrate`` refuses it unless ``--allow-locking`` is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from mailbus.kernel.errors import ConfigError

__all__ = ["Migration", "available_migrations", "statements"]

_ONLINE = "-- mailbus: online"
_LOCKING = "-- mailbus: locking"
_INDEX = re.compile(
    r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE
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

    @property
    def index_names(self) -> tuple[str, ...]:
        """The indexes an online migration builds (lower case, as PostgreSQL folds them)."""
        return tuple(m.group(1).lower() for s in statements(self.sql) if (m := _INDEX.match(s)))

    @property
    def plan(self) -> str:
        """How it is applied, as ``migrate --status/--dry-run`` name it."""
        if self.online:
            return "online: builds without blocking writes; waits for older transactions"
        if self.locking:
            return "locking: stops writes to its table while it runs; needs --allow-locking"
        return "takes its locks for an instant; waits, retrying, behind long transactions"


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
