"""The delivery benchmark's CPU per mail covers the middle 80% of acceptances only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness import cpu_between


def test_start_up_and_the_idle_tail_are_outside_the_window() -> None:
    samples = [
        (100.0, 0.0),  # started
        (101.0, 1.5),  # imports and joining the group: CPU, no mail yet
        (102.0, 1.7),  # the 10th percentile's acceptance
        (103.0, 2.0),
        (104.0, 2.3),  # the 90th percentile's acceptance
        (106.0, 2.9),  # the tail and the idle wait for the last count
    ]
    assert cpu_between(samples, 102.0, 104.0) == pytest.approx(0.6)


def test_each_end_takes_the_nearest_sample() -> None:
    samples = [(0.0, 0.0), (1.0, 1.0), (2.0, 3.0)]
    assert cpu_between(samples, 0.9, 2.4) == pytest.approx(2.0)
