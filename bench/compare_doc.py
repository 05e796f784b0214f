"""The pure parts of bench/compare.py: the alternating run order, the arguments a
benchmark is run with, which bench/baselines/ patch ports today's benchmarks onto a
commit, and the A/B table (min / median / max per side, ratio B/A of the
medians). No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from report_doc import Summary, number, summarize

__all__ = ["BENCHES", "Pair", "baseline_patch", "benches", "order", "pairs", "ratio", "table"]

# name -> (script, arguments): sizes that keep one A/B round in minutes on two shared cores.
BENCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    "relay": ("relay_throughput.py", ("--rows", "50000", "--naive-rows", "500", "--seconds", "10")),
    "delivery": (
        "delivery_throughput.py",
        ("--runs", "1", "--rows", "8000", "--max-consumers", "2", "--seconds", "15"),
    ),
    "delivery8": (
        "delivery_throughput.py",
        (
            "--runs",
            "1",
            "--rows",
            "2000",
            "--max-consumers",
            "1",
            "--no-steady",
            "--in-flight",
            "8",
        ),
    ),
    # P0 rows at 100/s while 100,000 newsletters drain: the P0 lane's commit→broker
    "lanes": (
        "relay_lane_parts.py",
        ("--rate", "100", "--seconds", "10", "--backlog", "100000", "--runs", "1"),
    ),
    # P0 password resets at 5/s while a campaign of 1M recipients fans out and drains
    "campaign": ("campaign_p0_latency.py", ("--runs", "1", "--seconds", "20")),
    "steady": (
        "delivery_throughput.py",
        ("--runs", "1", "--rows", "2000", "--max-consumers", "1", "--seconds", "20"),
    ),
}


@dataclass(frozen=True)
class Pair:
    name: str
    unit: str
    a: Summary | None
    b: Summary | None

    @property
    def ratio(self) -> float:
        return ratio(self.a, self.b)


def benches(spec: str) -> list[str]:
    """``relay,delivery`` → the names, each known; a clear error otherwise."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHES]
    if not names or unknown:
        raise ValueError(f"unknown benchmark {unknown or spec!r}; known: {', '.join(BENCHES)}")
    return names


def baseline_patch(sha: str, names: Iterable[str]) -> str | None:
    """Of ``names`` (the files in bench/baselines/), the one for commit ``sha`` (full):
    ``<sha or an abbreviation of it, at least 7 hex digits>.patch``; None when none is.
    Two that both match are an error (which to apply would be a guess)."""
    found = [
        name
        for name in names
        if name.endswith(".patch")
        and len(stem := name.removesuffix(".patch")) >= 7
        and all(c in "0123456789abcdef" for c in stem)
        and sha.lower().startswith(stem)
    ]
    if len(found) > 1:
        raise ValueError(f"several patches in bench/baselines/ match {sha}: {sorted(found)}")
    return found[0] if found else None


def order(runs: int) -> list[tuple[str, int]]:
    """A, B, A, B, …: each side's n-th run next to the other's, so a load spike on the
    shared machine falls on both sides rather than on one."""
    return [(side, run) for run in range(runs) for side in ("A", "B")]


def ratio(a: Summary | None, b: Summary | None) -> float:
    """B's median over A's; NaN when either is missing or A's is zero as printed (a CPU
    share of 2e-12 µs a row is no baseline)."""
    if a is None or b is None or a.median != a.median or b.median != b.median:
        return float("nan")
    if number(a.median).strip("-") == number(0.0):
        return float("nan")
    return b.median / a.median


def pairs(
    figures_a: Iterable[Mapping[str, Any]], figures_b: Iterable[Mapping[str, Any]]
) -> list[Pair]:
    """Each figure of either side with both sides' summaries, A's order first."""
    a = {s.name: s for s in summarize(figures_a)}
    b = {s.name: s for s in summarize(figures_b)}
    names = list(a) + [name for name in b if name not in a]
    return [Pair(n, (a.get(n) or b[n]).unit, a.get(n), b.get(n)) for n in names]


def _cell(s: Summary | None) -> str:
    if s is None:
        return "not measured"
    return f"{number(s.median)} ({number(s.low)}-{number(s.high)}, {s.runs})"


def table(rows: Sequence[Pair], label_a: str, label_b: str) -> str:
    """A Markdown table: figure, unit, A median (min-max, runs), B likewise, B/A."""
    lines = [
        f"| figure | unit | A {label_a} | B {label_b} | B/A |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        r = row.ratio
        shown = "-" if r != r else f"{r:.2f}"
        lines.append(f"| {row.name} | {row.unit} | {_cell(row.a)} | {_cell(row.b)} | {shown} |")
    return "\n".join(lines)
