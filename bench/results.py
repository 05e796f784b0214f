"""How a benchmark hands its figures to bench/report.py: JSON lines in the file named by
``MAILBUS_BENCH_RESULTS`` (nothing is written when it is unset, so every script still runs
alone and prints). Standard library only."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

ENV = "MAILBUS_BENCH_RESULTS"


def _write(entry: dict[str, object]) -> None:
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")


def record(name: str, value: float, unit: str) -> None:
    """One figure of this run, e.g. ``record("relay rows/s, batched", 9000.0, "rows/s")``."""
    _write({"kind": "figure", "name": name, "value": float(value), "unit": unit})


def record_series(name: str, points: Iterable[Sequence[float]] | Iterable[float]) -> None:
    """Raw samples for a chart: numbers, or (x, y) pairs."""
    _write({"kind": "series", "name": name, "points": list(points)})


def read(path: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """(figures, series) recorded in ``path``; a missing file holds none."""
    if not os.path.exists(path):
        return [], []
    with open(path, encoding="utf-8") as source:
        entries = [json.loads(line) for line in source if line.strip()]
    return (
        [e for e in entries if e["kind"] == "figure"],
        [e for e in entries if e["kind"] == "series"],
    )
