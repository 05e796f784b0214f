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
rows), until every table came back short or the budget ran out; then it records the run,
with what is still past a window, for the relay's ``mailbus_retention_backlog_rows``.
Running it again is always safe: a second run finds only what the first left.
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
    "refuse_short_window",
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
    or ``budget_s`` is spent; then count what is left and record the run. ``on_batch``
    hears how many rows each committed batch deleted."""
    q = _queries()
    deadline = clock() + budget_s
    rows = dict.fromkeys((t for t, _ in TABLES), 0)
    batches = dict.fromkeys(rows, 0)
    state: dict[str, bool | None] = dict.fromkeys(rows, True)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
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
            left = _backlog(conn, q, windows)
            complete = all(s is False for s in state.values())
            conn.execute(
                q["report"],
                {
                    "complete": complete,
                    "deleted": sum(rows.values()),
                    "backlog": sum(b.rows for b in left),
                    "overdue_s": max(b.overdue_s for b in left),
                },
            )
    except psycopg.Error as exc:
        raise StorageError(f"retention stopped: {exc}") from exc
    done = [Pruned(t, rows[t], batches[t], complete=state[t] is False) for t, _ in TABLES]
    return done, left


def _backlog(conn: psycopg.Connection[Any], q: dict[str, str], windows: Windows) -> list[Backlog]:
    found = []
    for table, _ in TABLES:
        params = {"what": table, "window_s": windows.of_table(table), "cap": BACKLOG_CAP}
        row: Any = conn.execute(q["backlog"], params).fetchone()
        found.append(Backlog(table, int(row[0]), float(row[1])))
    return found


def count_past_retention(database_url: str, windows: Windows) -> list[Backlog]:
    """``--dry-run``: what each table has past its window now (up to BACKLOG_CAP rows)."""
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            return _backlog(conn, _queries(), windows)
    except psycopg.Error as exc:
        raise StorageError(f"cannot count what retention would delete: {exc}") from exc
