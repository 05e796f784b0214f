"""What `mailbus retention run` and `retention floors` say: one document each, printed as
lines or, with ``--json``, as that document itself (its shape:
docs/reference/cli.md#json-documents). Windows and floors in seconds, as the settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mailbus.consumer.retention import TABLES, Backlog, Pruned, Windows

__all__ = [
    "behind_message",
    "dry_run_document",
    "floors_document",
    "floors_lines",
    "run_document",
    "run_lines",
]


def _windows(windows: Windows) -> dict[str, float]:
    return {table: windows.of_table(table) for table, _ in TABLES}


def dry_run_document(windows: Windows, left: Sequence[Backlog]) -> dict[str, Any]:
    """What a run would delete now, by table (rows past its window, counted up to
    BACKLOG_CAP); nothing was deleted."""
    return {
        "dry_run": True,
        "window_s": _windows(windows),
        "would_delete": {b.table: b.rows for b in left},
    }


def run_document(
    windows: Windows, done: Sequence[Pruned], left: Sequence[Backlog], budget_s: float
) -> dict[str, Any]:
    """What a run deleted, by table, and, when its budget ran out first, what is still past
    a window (``caught_up`` false: exit 3)."""
    caught_up = all(table.complete for table in done)
    return {
        "dry_run": False,
        "window_s": _windows(windows),
        "deleted": {t.table: {"rows": t.rows, "batches": t.batches} for t in done},
        "caught_up": caught_up,
        "budget_s": budget_s,
        "behind_rows": 0 if caught_up else sum(b.rows for b in left),
        "overdue_s": None if caught_up else max((b.overdue_s for b in left), default=0.0),
    }


def run_lines(run: dict[str, Any]) -> list[str]:
    window = f"retention {run['window_s']['sends'] / 86400:g}d"
    if run["dry_run"]:
        found = ", ".join(f"{table} {rows}" for table, rows in run["would_delete"].items())
        return [f"{window}: would delete {found} (nothing was deleted: --dry-run)"]
    lines = [
        f"{window}: {table} {t['rows']} deleted, {t['batches']} batches"
        for table, t in run["deleted"].items()
    ]
    if run["caught_up"]:
        return [*lines, f"{window}: caught up"]
    return [*lines, f"{window}: {behind_message(run)}"]


def behind_message(run: dict[str, Any]) -> str:
    """Why a run that spent its budget exits 3, and what to do."""
    return (
        f"budget {run['budget_s']:g}s spent, still behind: {run['behind_rows']} rows past"
        f" their window, the oldest {run['overdue_s'] / 3600:.1f} h overdue (exit 3; run"
        " again, or raise --budget or --batch)"
    )


def floors_document(floors: dict[str, float], *, pinned: bool) -> dict[str, Any]:
    """Each table's floor in seconds; ``set``: pinned by this run (``--set``)."""
    return {"set": pinned, "floor_s": {table: floors[table] for table, _ in TABLES}}


def floors_lines(document: dict[str, Any]) -> list[str]:
    shown = ", ".join(f"{table} {s / 86400:g}d" for table, s in document["floor_s"].items())
    return [f"retention floors: {shown}"]
