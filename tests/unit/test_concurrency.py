from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.concurrency import AdaptiveLimit, LimitPolicy, on_latency, restart_slowly

POLICY = LimitPolicy(min_limit=1, max_limit=64)


def run(
    state: AdaptiveLimit, latency: float, seconds: float, rate: float, start: float
) -> tuple[AdaptiveLimit, float]:
    now = start
    for _ in range(int(seconds * rate)):
        now += 1 / rate
        state = on_latency(state, latency, now, POLICY)
    return state, now


def test_limit_falls_when_latency_steps_up_and_recovers_when_it_returns() -> None:
    state, now = run(AdaptiveLimit(64.0), 0.020, 5, 500, 0.0)
    assert state.slots == 64
    slow, now = run(state, 0.500, 10, 20, now)
    assert slow.slots <= 4
    fast_again, _ = run(slow, 0.020, 5, 200, now)
    assert fast_again.slots > 4 * slow.slots


def test_steady_latency_grows_the_limit_to_its_ceiling() -> None:
    state, _ = run(AdaptiveLimit(1.0), 0.050, 30, 100, 0.0)
    assert state.slots == 64


def test_decreases_are_spaced() -> None:
    state, _ = run(AdaptiveLimit(32.0), 0.010, 1, 100, 0.0)
    cut = on_latency(state, 1.0, 10.0, POLICY)
    cut_again = on_latency(cut, 1.0, 10.1, POLICY)
    assert cut.limit < state.limit and cut_again.limit == cut.limit


def test_restart_slowly_starts_from_the_floor() -> None:
    assert restart_slowly(AdaptiveLimit(40.0), POLICY).slots == 1


@given(st.lists(st.floats(0.0001, 30.0), min_size=1, max_size=300))
def test_limit_stays_within_bounds(latencies: list[float]) -> None:
    state = AdaptiveLimit(8.0)
    for n, latency in enumerate(latencies):
        state = on_latency(state, latency, n * 0.1, POLICY)
        assert POLICY.min_limit <= state.limit <= POLICY.max_limit
