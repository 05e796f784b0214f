"""`mailbus retention run`: settled mail older than ``MAILBUS_RETENTION`` is deleted in
small batches, bounded per run; nothing that is not final is ever touched.

Why batches of a flat table and not dropped partitions: docs/retention.md. What may go is
stated once in SQL, by the ``*_past_retention`` views of migration 0028, and deleted only
by the SECURITY DEFINER function ``mailbus_prune`` of migration 0057 (the retention role
holds no DELETE grant); this module walks them table by table, one transaction per batch
of ``batch`` rows (so locks are short, WAL comes in small pieces and autovacuum reuses the
space for new rows), until a batch comes back short or ``max_batches`` were done. Running
it again is always safe: a second run finds only what the first left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = ["TABLES", "Pruned", "count_past_retention", "keep_going", "prune"]

# (what the output and mailbus_prune call it, its count query), in the order they run:
# sends first, so their dead letters go with them.
TABLES = (
    ("sends", "count_sends"),
    ("dead letters", "count_dead_letters"),
    ("delivery events", "count_delivery_events"),
)


@dataclass(frozen=True)
class Pruned:
    """What one run deleted from one table."""

    table: str
    rows: int
    batches: int
    complete: bool  # False: stopped at max_batches with more to delete


def keep_going(deleted: int, batch: int, batches: int, max_batches: int) -> bool | None:
    """After a batch: True to run another, False when the table is done (a short batch),
    None when the run's bound stopped it with more left."""
    if deleted < batch:
        return False
    return True if batches < max_batches else None


def _queries() -> dict[str, str]:
    return load_queries("mailbus.consumer", "retention.sql")


def prune(database_url: str, retention_s: float, batch: int, max_batches: int) -> list[Pruned]:
    """Delete what is past the window, table by table; one transaction per batch."""
    q = _queries()
    results = []
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for table, _ in TABLES:
                rows = batches = 0
                while True:
                    row: Any = conn.execute(
                        q["prune"], {"what": table, "retention_s": retention_s, "batch": batch}
                    ).fetchone()
                    deleted = int(row[0])
                    rows, batches = rows + deleted, batches + 1
                    more = keep_going(deleted, batch, batches, max_batches)
                    if not more:
                        results.append(Pruned(table, rows, batches, complete=more is False))
                        break
    except psycopg.Error as exc:
        raise StorageError(f"retention stopped: {exc}") from exc
    return results


def count_past_retention(database_url: str, retention_s: float) -> dict[str, int]:
    """``--dry-run``: how many rows of each table a run would delete now (no bound)."""
    q = _queries()
    try:
        with psycopg.connect(database_url) as conn:
            conn.execute(q["window"], {"retention_s": str(retention_s)})
            counts: dict[str, int] = {}
            for table, count_query in TABLES:
                row: Any = conn.execute(q[count_query]).fetchone()
                counts[table] = int(row[0])
            return counts
    except psycopg.Error as exc:
        raise StorageError(f"cannot count what retention would delete: {exc}") from exc
