from __future__ import annotations

import pytest

from mailbus.consumer.core.breaker import Breaker, BreakerPolicy, BreakerState, admit, record

POLICY = BreakerPolicy(failure_threshold=3, cool_down_s=5.0, max_cool_down_s=20.0)


def fail(breaker: Breaker, times: int, now: float = 0.0) -> Breaker:
    for _ in range(times):
        breaker = record(breaker, False, now, POLICY)
    return breaker


def test_opens_after_a_run_of_failures_only() -> None:
    assert fail(Breaker(), 2).state is BreakerState.CLOSED
    assert record(fail(Breaker(), 2), True, 0, POLICY) == Breaker()  # success resets the run
    assert fail(Breaker(), 3).state is BreakerState.OPEN


def test_open_admits_nothing_until_the_cool_down_then_one_probe() -> None:
    breaker = fail(Breaker(), 3, now=100.0)
    assert admit(breaker, 104.9)[1] is False
    breaker, allowed = admit(breaker, 105.0)
    assert allowed and breaker.state is BreakerState.HALF_OPEN
    assert admit(breaker, 105.1)[1] is False  # a single probe at a time


def test_probe_success_closes_and_failure_doubles_the_cool_down() -> None:
    breaker, _ = admit(fail(Breaker(), 3, now=0.0), 5.0)
    assert record(breaker, True, 6.0, POLICY).state is BreakerState.CLOSED
    reopened = record(breaker, False, 6.0, POLICY)
    assert (reopened.state, reopened.cool_down_s, reopened.opened_at) == (
        BreakerState.OPEN,
        10.0,
        6.0,
    )
    again, _ = admit(reopened, 16.0)
    assert record(again, False, 16.0, POLICY).cool_down_s == 20.0  # capped
    assert record(record(again, False, 16.0, POLICY), False, 17.0, POLICY).cool_down_s == 20.0


@pytest.mark.parametrize("state", list(BreakerState))
def test_closed_always_admits_and_only_closed(state: BreakerState) -> None:
    breaker = Breaker(state=state, opened_at=0.0, cool_down_s=5.0, probe_out=True)
    assert admit(breaker, 1.0)[1] is (state is BreakerState.CLOSED)
