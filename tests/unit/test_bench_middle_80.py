"""The PgQueuer peer's jobs/s covers the middle 80% of completions only, as the delivery
benchmark's emails/s covers the middle 80% of acceptances."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from harness import middle_80


def test_start_up_and_the_drain_tail_are_outside_the_window() -> None:
    start_up = [5.0]  # the first fetch, well before the steady pace
    steady = [10.0 + n / 100 for n in range(18)]  # 100 a second
    tail = [30.0]  # the last straggler
    assert middle_80(start_up + steady + tail) == pytest.approx(100)


def test_the_order_of_the_completions_does_not_matter() -> None:
    times = [float(n) for n in range(100)]
    assert middle_80(list(reversed(times))) == middle_80(times) == pytest.approx(1.0)


def test_the_window_ends_are_discrete_percentiles() -> None:
    # 10 completions: the 1st and the 9th, 8 completions apart over 8 s
    assert middle_80([0, 1, 2, 3, 4, 5, 6, 7, 8, 100]) == pytest.approx(1.0)


@pytest.mark.parametrize("times", [[], [1.0], [2.0, 2.0, 2.0]])
def test_too_few_or_simultaneous_completions_have_no_rate(times: list[float]) -> None:
    with pytest.raises(ValueError, match="too few"):
        middle_80(times)
