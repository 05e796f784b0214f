"""The report's PNG charts (matplotlib, Agg backend), drawn from the stored results."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

IN_FLIGHT = re.compile(r"delivery emails/s, 1 consumer\(s\) at (\d+) in flight")


def _figures(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [f for run in entry.get("runs", []) for f in run.get("figures", [])]


def _series(entry: Mapping[str, Any], name: str) -> list[list[Any]]:
    return [
        s["points"]
        for run in entry.get("runs", [])
        for s in run.get("series", [])
        if s["name"] == name
    ]


def throughput_by_in_flight(entry: Mapping[str, Any], out: Path, latency_ms: float = 50) -> bool:
    rates: dict[int, list[float]] = {}
    for figure in _figures(entry):
        if match := IN_FLIGHT.fullmatch(figure["name"]):
            rates.setdefault(int(match.group(1)), []).append(float(figure["value"]))
    if not rates:
        return False
    limits = sorted(rates)
    medians = [statistics.median(rates[n]) for n in limits]
    errors = [
        [m - min(rates[n]) for n, m in zip(limits, medians, strict=True)],
        [max(rates[n]) - m for n, m in zip(limits, medians, strict=True)],
    ]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(limits, medians, yerr=errors, marker="o", capsize=4, label="one consumer")
    ax.plot(
        limits, [n / (latency_ms / 1000) for n in limits], "--", label="bound: in-flight ÷ latency"
    )
    ax.set(
        xlabel="MAILBUS_MAX_IN_FLIGHT", ylabel="emails/s",
        title=f"Delivery throughput, provider {latency_ms:g} ms (median, min-max)",
    )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.minorticks_off()
    ax.set_xticks(limits, [str(n) for n in limits])
    ax.legend()
    _save(fig, out)
    return True


def latency_distribution(samples: Sequence[Sequence[float]], title: str, out: Path) -> bool:
    if not samples:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for n, run in enumerate(samples, 1):
        ms = sorted(v * 1000 for v in run)
        ax.plot(ms, [i / len(ms) for i in range(1, len(ms) + 1)], label=f"run {n}")
    ax.set(xlabel="commit→accepted (ms)", ylabel="share of mails", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, out)
    return True


def backlog(entry: Mapping[str, Any], out: Path) -> bool:
    runs = _series(entry, "outage backlog (s, rows)")
    phases = _series(entry, "outage phases (s)")
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for n, points in enumerate(runs, 1):
        ax.plot([p[0] for p in points], [p[1] for p in points], label=f"run {n}")
    if phases:
        ax.axvspan(phases[0][0], phases[0][1], color="red", alpha=0.1, label="provider down")
    ax.set(xlabel="seconds", ylabel="open rows (pending, sending, unknown)",
           title="Backlog through a provider outage")  # fmt: skip
    ax.legend()
    _save(fig, out)
    return True


def delivery_latency(entry: Mapping[str, Any], out: Path) -> bool:
    samples = _series(entry, "delivery commit→accepted (s)")
    return latency_distribution(samples, "Delivery commit→accepted, steady rate (CDF)", out)


def _save(fig: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
