"""Properties of the retry delay: bounds, cap, growth, Retry-After as a floor."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.backoff import RetryPolicy, backoff_ceiling, retry_delay
from mailbus.consumer.core.outcome import MAX_RETRY_AFTER_S
from mailbus.kernel.errors import ConfigError

unit = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
attempts_st = st.integers(min_value=1, max_value=200)
policies = st.builds(
    lambda base, factor, max_attempts: RetryPolicy(max_attempts, base, base * factor),
    st.floats(min_value=0.01, max_value=60.0),
    st.floats(min_value=1.0, max_value=10_000.0),
    st.integers(min_value=1, max_value=50),
)


def const(value: float) -> Callable[[], float]:
    return lambda: value


def test_defaults_match_the_contract() -> None:
    assert RetryPolicy() == RetryPolicy(max_attempts=8, base_s=2.0, cap_s=300.0)


@pytest.mark.parametrize(
    ("attempts", "low", "high"),
    [(1, 1.0, 2.0), (2, 2.0, 4.0), (3, 4.0, 8.0), (8, 128.0, 256.0), (9, 150.0, 300.0)],
)
def test_default_schedule(attempts: int, low: float, high: float) -> None:
    policy = RetryPolicy()
    assert retry_delay(attempts, policy, const(0.0), None) == low
    assert retry_delay(attempts, policy, const(0.5), None) == (low + high) / 2
    assert retry_delay(attempts, policy, const(1.0), None) == high


def test_attempts_below_one_count_as_one() -> None:
    assert retry_delay(0, RetryPolicy(), const(1.0), None) == 2.0
    assert retry_delay(-3, RetryPolicy(), const(1.0), None) == 2.0


def test_a_huge_attempt_count_does_not_overflow() -> None:
    assert retry_delay(10**9, RetryPolicy(), const(1.0), None) == 300.0


@pytest.mark.parametrize("value", [-1.0, 2.0, float("nan")])
def test_a_faulty_random_source_cannot_break_the_bounds(value: float) -> None:
    delay = retry_delay(3, RetryPolicy(), const(value), None)
    assert 4.0 <= delay <= 8.0


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"max_attempts": 0}, "MAILBUS_MAX_ATTEMPTS"),
        ({"base_s": 0.0}, "MAILBUS_BACKOFF_BASE"),
        ({"base_s": float("inf")}, "MAILBUS_BACKOFF_BASE"),
        ({"base_s": 10.0, "cap_s": 5.0}, "MAILBUS_BACKOFF_CAP"),
        ({"cap_s": float("nan")}, "MAILBUS_BACKOFF_CAP"),
    ],
)
def test_bad_policy_names_the_setting(kwargs: dict[str, float], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.setting == setting


@given(policies, attempts_st, unit)
def test_delay_is_within_half_and_whole_of_the_ceiling(
    policy: RetryPolicy, attempts: int, r: float
) -> None:
    ceiling = backoff_ceiling(attempts, policy)
    assert ceiling == min(policy.cap_s, policy.base_s * 2.0 ** min(attempts - 1, 1000))
    delay = retry_delay(attempts, policy, const(r), None)
    assert ceiling / 2 <= delay <= ceiling


@given(policies, attempts_st, unit)
def test_delay_never_exceeds_the_cap(policy: RetryPolicy, attempts: int, r: float) -> None:
    assert retry_delay(attempts, policy, const(r), None) <= policy.cap_s


@st.composite
def below_cap(draw: st.DrawFn) -> tuple[RetryPolicy, int]:
    """A policy and an attempt whose *next* ceiling is still uncapped (or exactly the cap)."""
    base = draw(st.floats(min_value=0.01, max_value=60.0))
    doublings = draw(st.integers(min_value=1, max_value=40))
    cap = base * 2.0**doublings * draw(st.floats(min_value=1.0, max_value=1.99))
    attempts = draw(st.integers(min_value=1, max_value=doublings))
    return RetryPolicy(8, base, cap), attempts


@given(below_cap(), unit, unit)
def test_delays_never_shrink_before_the_cap(
    case: tuple[RetryPolicy, int], r1: float, r2: float
) -> None:
    # Up to the attempt whose ceiling first reaches the cap, any jitter of the next delay
    # is at least any jitter of this one.
    policy, attempts = case
    assert policy.base_s * 2.0**attempts <= policy.cap_s
    first = retry_delay(attempts, policy, const(r1), None)
    second = retry_delay(attempts + 1, policy, const(r2), None)
    assert second >= first


@given(policies, st.lists(unit, min_size=30, max_size=30))
def test_a_whole_schedule_grows_until_it_reaches_the_cap(
    policy: RetryPolicy, rands: list[float]
) -> None:
    delays = [retry_delay(n, policy, const(r), None) for n, r in enumerate(rands, start=1)]
    for n, (a, b) in enumerate(itertools.pairwise(delays), start=1):
        if backoff_ceiling(n + 1, policy) < policy.cap_s:
            assert b >= a


@given(
    policies,
    attempts_st,
    unit,
    st.floats(min_value=0.0, max_value=1e12, allow_nan=False),
)
def test_retry_after_is_a_minimum(
    policy: RetryPolicy, attempts: int, r: float, retry_after: float
) -> None:
    plain = retry_delay(attempts, policy, const(r), None)
    delay = retry_delay(attempts, policy, const(r), retry_after)
    assert delay >= min(retry_after, MAX_RETRY_AFTER_S)
    assert delay == max(plain, min(retry_after, MAX_RETRY_AFTER_S))


@pytest.mark.parametrize("value", [-5.0, float("nan")])
def test_nonsense_retry_after_is_ignored(value: float) -> None:
    plain = retry_delay(2, RetryPolicy(), const(0.3), None)
    assert retry_delay(2, RetryPolicy(), const(0.3), value) == plain


def test_rand_is_called_once_per_delay() -> None:
    calls: list[int] = []

    def rand() -> float:
        calls.append(1)
        return 0.25

    retry_delay(4, RetryPolicy(), rand, 1.0)
    assert len(calls) == 1
