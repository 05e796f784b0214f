"""The benchmarks' CPU figures: the delivery benchmark's CPU per mail covers the middle 80%
of acceptances only; the relay benchmark's split of the machine's CPU per row."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness import cpu_between
from relay_throughput import cpu_per_row


def test_start_up_and_the_idle_tail_are_outside_the_window() -> None:
    samples = [
        (100.0, {"consumers": 0.0}),  # started
        (101.0, {"consumers": 1.5}),  # imports and joining the group: CPU, no mail yet
        (102.0, {"consumers": 1.7}),  # the 10th percentile's acceptance
        (103.0, {"consumers": 2.0}),
        (104.0, {"consumers": 2.3}),  # the 90th percentile's acceptance
        (106.0, {"consumers": 2.9}),  # the tail and the idle wait for the last count
    ]
    assert cpu_between(samples, 102.0, 104.0)["consumers"] == pytest.approx(0.6)


def test_each_end_takes_the_nearest_sample() -> None:
    samples = [
        (0.0, {"a": 0.0, "b": 0.0}),
        (1.0, {"a": 1.0, "b": 5.0}),
        (2.0, {"a": 3.0, "b": 6.0}),
    ]
    assert cpu_between(samples, 0.9, 2.4) == pytest.approx({"a": 2.0, "b": 1.0})


def test_the_machine_time_no_group_used_is_other_and_busy_is_a_share_of_all_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    samples = [
        (10.0, {"machine": 0.0, "relay": 0.0, "postgres": 0.0}),
        (12.0, {"machine": 3.0, "relay": 1.0, "postgres": 1.5}),
    ]
    shares = cpu_per_row(samples, 10.0, 12.0, rows=100_000)
    assert shares == pytest.approx({"relay": 10.0, "postgres": 15.0, "other": 5.0, "busy": 0.75})
