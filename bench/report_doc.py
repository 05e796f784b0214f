"""docs/benchmarks.md from the stored results: pure functions, no I/O (bench/report.py
reads and writes the files)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    name: str
    unit: str
    low: float
    median: float
    high: float
    runs: int


def summarize(figures: Iterable[Mapping[str, Any]]) -> list[Summary]:
    """Min / median / max of each named figure over the runs, in first-seen order;
    NaN values (a percentile of too few samples) are left out."""
    values: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for figure in figures:
        name = str(figure["name"])
        units.setdefault(name, str(figure["unit"]))
        values.setdefault(name, [])
        value = float(figure["value"])
        if value == value:  # not NaN
            values[name].append(value)
    return [
        Summary(name, units[name], min(v), statistics.median(v), max(v), len(v))
        if v
        else Summary(name, units[name], float("nan"), float("nan"), float("nan"), 0)
        for name, v in values.items()
    ]


def number(value: float) -> str:
    """A figure as a reader wants it: thousands separated, decimals only where small."""
    if value != value:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(summaries: Sequence[Summary]) -> str:
    """A Markdown table: figure, unit, min, median, max, runs."""
    lines = [
        "| figure | unit | min | median | max | runs |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {s.name} | {s.unit} | {number(s.low)} | {number(s.median)} | {number(s.high)}"
        f" | {s.runs} |"
        for s in summaries
    ]
    return "\n".join(lines)


def load_range(runs: Sequence[Mapping[str, Any]]) -> str:
    """The 1-minute load averages seen before and after each run, as a range."""
    before = [float(r["load_before"][0]) for r in runs]
    after = [float(r["load_after"][0]) for r in runs]
    if not before:
        return "-"
    return f"{min(before):.1f}-{max(before):.1f} before, {min(after):.1f}-{max(after):.1f} after"


def machine_section(machine: Mapping[str, str]) -> str:
    return "\n".join(f"- **{key}**: {value}" for key, value in machine.items())


def bench_section(
    title: str,
    about: str,
    entry: Mapping[str, Any],
    charts: Sequence[str] = (),
    stale: str | None = None,
) -> str:
    runs = entry.get("runs", [])
    figures = [f for r in runs for f in r.get("figures", [])]
    parts = [
        f"### {title}",
        "",
        about,
        "",
        f"`{entry['command']}` — {'quick sizes' if entry.get('quick') else 'full sizes'},"
        f" {len(runs)} invocation(s), {entry.get('taken', '?')}; load average (1 min) "
        f"{load_range(runs)}.",
        "",
    ]
    if stale:
        parts += [f"**Stale**: {stale}", ""]
    errors = [r["error"] for r in runs if r.get("error")]
    if errors:
        parts += [f"**{len(errors)} run(s) failed**: `{errors[-1]}`", ""]
    parts.append(table(summarize(figures)) if figures else "_No figures recorded._")
    parts += [f"\n![{title}]({chart})" for chart in charts]
    return "\n".join(parts) + "\n"


def comparison_table(rows: Sequence[tuple[str, Summary | None, Summary | None]]) -> str:
    """Ours against the peer, medians with (min-max), one line per compared figure."""

    def cell(s: Summary | None) -> str:
        if s is None or s.runs == 0:
            return "not measured"
        return f"{number(s.median)} {s.unit} ({number(s.low)}-{number(s.high)}, {s.runs} runs)"

    lines = ["| figure | mailbus | peer |", "| --- | --- | --- |"]
    lines += [f"| {label} | {cell(ours)} | {cell(theirs)} |" for label, ours, theirs in rows]
    return "\n".join(lines)


def find(summaries: Iterable[Summary], prefix: str) -> Summary | None:
    """The first summary whose name starts with ``prefix``."""
    return next((s for s in summaries if s.name.startswith(prefix)), None)
