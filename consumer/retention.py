"""`mailbus retention run`: settled mail older than ``MAILBUS_RETENTION``, campaigns and
their recipients, and the console's audit past their own windows are deleted in small
batches until none is left or the run's time budget is spent; nothing that is not final is
ever touched.

Why batches of a flat table and not dropped partitions: docs/retention.md. What may go is
stated in SQL: the ``*_past_retention`` views of migration 0028 for mail, deleted only by
the SECURITY DEFINER function ``mailbus_prune`` (0057), and ``mailbus_prune_history``
(0062) for campaigns, recipients and the audit; the retention role holds no DELETE grant.
This module takes one batch of each table in turn, one transaction per batch of ``batch``
rows (so locks are short, WAL comes in small pieces and autovacuum reuses the space for new
rows), until every table came back short or the budget ran out; then it has the database
record the run, with what is still past a window, for the relay's
``mailbus_retention_backlog_rows``. Running it again is always safe: a second run finds only
what the first left.

The windows are a fact of the database too (migration 0064): each table's floor in
``retention_floors``, which the functions will not go under and the report counts against.
The operator pins them to the configured windows (:func:`set_floors`, ``retention floors
--set``); a run whose windows are not the floors is refused before it deletes anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from mailbus.kernel.errors import ConfigError, StorageError
from mailbus.kernel.settings import Settings
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "BACKLOG_CAP",
    "TABLES",
    "Backlog",
    "Pruned",
    "Windows",
    "count_past_retention",
    "keep_going",
    "prune",
    "read_floors",
    "refuse_other_floors",
    "refuse_short_window",
    "set_floors",
]

# (what the output and the SQL functions call it, the named query deleting one batch), in
# the order each pass runs them: sends first, so their dead letters go with them;
# recipients before their campaign.
TABLES = (
    ("sends", "prune"),
    ("dead letters", "prune"),
    ("delivery events", "prune"),
    ("campaign recipients", "prune_history"),
    ("campaigns", "prune_history"),
    ("console audit", "prune_history"),
)
BACKLOG_CAP = 10_000_000  # rows counted per table past a window: the gauge says "at least"


@dataclass(frozen=True)
class Windows:
    """Each table's window in seconds (MAILBUS_RETENTION and its siblings)."""

    mail: float
    recipients: float
    campaigns: float
    audit: float

    @classmethod
    def of(cls, settings: Settings) -> Windows:
        return cls(
            settings.retention,
            settings.retention_recipients,
            settings.retention_campaigns,
            settings.retention_audit,
        )

    def of_table(self, table: str) -> float:
        if table == "campaign recipients":  # a campaign goes with its recipients
            return min(self.recipients, self.campaigns)
        return {"campaigns": self.campaigns, "console audit": self.audit}.get(table, self.mail)

    @staticmethod
    def setting_of(table: str) -> str:
        return {
            "campaign recipients": "MAILBUS_RETENTION_RECIPIENTS",
            "campaigns": "MAILBUS_RETENTION_CAMPAIGNS",
            "console audit": "MAILBUS_RETENTION_AUDIT",
        }.get(table, "MAILBUS_RETENTION")


@dataclass(frozen=True)
class Pruned:
    """What one run deleted from one table."""

    table: str
    rows: int
    batches: int
    complete: bool  # False: the budget ran out with more to delete


@dataclass(frozen=True)
class Backlog:
    """What is past a table's window now: rows (up to BACKLOG_CAP) and how long the oldest
    has been past it."""

    table: str
    rows: int
    overdue_s: float


def keep_going(deleted: int, batch: int, now: float, deadline: float) -> bool | None:
    """After a batch: True to run another, False when the table is done (a short batch),
    None when the budget is spent with more left."""
    if deleted < batch:
        return False
    return True if now < deadline else None


def refuse_short_window(retention_s: float, horizons: Sequence[tuple[str, float | None]]) -> None:
    """ConfigError (exit 2) when MAILBUS_RETENTION is shorter than a replay horizon: a send
    deleted while its event, key or look-up may still come back would go out twice."""
    for name, horizon_s in horizons:
        if horizon_s is not None and retention_s < horizon_s:
            raise ConfigError(
                "MAILBUS_RETENTION",
                f"{retention_s / 86400:g}d is shorter than {name} ({horizon_s / 86400:g}d):"
                " a mail deleted while it may still be replayed would be sent twice;"
                f" raise MAILBUS_RETENTION or lower {name}",
            )


def refuse_other_floors(windows: Windows, floors: dict[str, float]) -> None:
    """ConfigError (exit 2) when a window is not its table's floor in the database: a
    shorter one would be refused there, and a longer one would never count as caught up
    (the database measures what is left under its floors)."""
    for table, _ in TABLES:
        window, floor = windows.of_table(table), floors[table]
        if window != floor:
            raise ConfigError(
                Windows.setting_of(table),
                f"{window / 86400:g}d, but the database's floor for {table} is"
                f" {floor / 86400:g}d: pin the floors to the windows with"
                " `mailbus retention floors --set`, as the operator (docs/retention.md#floors)",
            )


def _queries() -> dict[str, str]:
    return load_queries("mailbus.consumer", "retention.sql")


def prune(
    database_url: str,
    windows: Windows,
    batch: int,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
    on_batch: Callable[[int], None] = lambda deleted: None,
) -> tuple[list[Pruned], list[Backlog]]:
    """Delete what is past the windows, one batch of each table in turn, until all are done
    or ``budget_s`` is spent; then have the database record the run and count what is
    left (under its floors: the windows, checked first). ``on_batch`` hears how many rows
    each committed batch deleted."""
    q = _queries()
    deadline = clock() + budget_s
    rows = dict.fromkeys((t for t, _ in TABLES), 0)
    batches = dict.fromkeys(rows, 0)
    state: dict[str, bool | None] = dict.fromkeys(rows, True)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            refuse_other_floors(windows, _floors(conn, q))
            while any(state.values()):
                for table, query in TABLES:
                    if not state[table]:
                        continue
                    params = {"what": table, "window_s": windows.of_table(table), "batch": batch}
                    row: Any = conn.execute(q[query], params).fetchone()
                    deleted = int(row[0])
                    on_batch(deleted)
                    rows[table] += deleted
                    batches[table] += 1
                    state[table] = keep_going(deleted, batch, clock(), deadline)
                if clock() >= deadline:  # a table mid-way stops with more left
                    state = {t: None if s else s for t, s in state.items()}
            reported = {kind: (int(n), float(s)) for kind, n, s in conn.execute(q["report"])}
    except psycopg.Error as exc:
        raise StorageError(f"retention stopped: {exc}") from exc
    done = [Pruned(t, rows[t], batches[t], complete=state[t] is False) for t, _ in TABLES]
    return done, [Backlog(t, *reported[t]) for t, _ in TABLES]


def _backlog(conn: psycopg.Connection[Any], q: dict[str, str], windows: Windows) -> list[Backlog]:
    found = []
    for table, _ in TABLES:
        params = {"what": table, "window_s": windows.of_table(table), "cap": BACKLOG_CAP}
        row: Any = conn.execute(q["backlog"], params).fetchone()
        found.append(Backlog(table, int(row[0]), float(row[1])))
    return found


def _floors(conn: psycopg.Connection[Any], q: dict[str, str]) -> dict[str, float]:
    return {what: float(floor_s) for what, floor_s in conn.execute(q["floors"])}


def read_floors(database_url: str) -> dict[str, float]:
    """Each table's floor in the database, in seconds."""
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            return _floors(conn, _queries())
    except psycopg.Error as exc:
        raise StorageError(f"cannot read the retention floors: {exc}") from exc


def set_floors(database_url: str, windows: Windows) -> dict[str, float]:
    """Pin each table's floor to its window, in one transaction (a login that may: the
    operator's or the tables' owner); return the floors now in force."""
    q = _queries()
    try:
        with psycopg.connect(database_url) as conn:
            for table, _ in TABLES:
                conn.execute(q["set_floor"], {"what": table, "floor_s": windows.of_table(table)})
            return _floors(conn, q)
    except psycopg.Error as exc:
        raise StorageError(f"retention floors not set: {exc}") from exc


def count_past_retention(database_url: str, windows: Windows) -> list[Backlog]:
    """``--dry-run``: what each table has past its window now (up to BACKLOG_CAP rows)."""
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            return _backlog(conn, _queries(), windows)
    except psycopg.Error as exc:
        raise StorageError(f"cannot count what retention would delete: {exc}") from exc
