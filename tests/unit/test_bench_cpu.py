"""The delivery benchmark's CPU per mail is taken mid-drain: start-up and the tail left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness import cpu_ms_per_row


def test_start_up_and_the_idle_tail_do_not_count() -> None:
    samples = [
        (0, 0.0),  # started
        (0, 1.5),  # imports and joining the group: CPU, no mail
        (50, 1.6),  # under 10% of 1,000
        (200, 1.7),  # the window opens
        (500, 2.0),
        (900, 2.1),  # the window closes
        (1000, 2.2),
        (1000, 2.9),  # idle until the last count
    ]
    assert cpu_ms_per_row(samples, 1000) == pytest.approx(1000 * 0.4 / 700)


def test_no_window_gives_zero_not_a_division_by_zero() -> None:
    assert cpu_ms_per_row([(0, 0.0), (1000, 3.0)], 1000) == 0.0
    assert cpu_ms_per_row([(500, 1.0), (500, 2.0)], 1000) == 0.0
