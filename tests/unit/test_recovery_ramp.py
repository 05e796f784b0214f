"""The recovery cap's ramp: starts at the rate, doubles every quarter ramp, lifts at the end."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.recovery import (
    RecoveryPolicy,
    allowed_between,
    recovery_rate,
    starts_recovery,
)
from mailbus.kernel.errors import ConfigError

POLICY = RecoveryPolicy(rate_per_s=100 / 60, ramp_s=600.0, after_s=30.0)


@pytest.mark.parametrize(
    ("elapsed", "multiple"), [(0, 1), (150, 2), (300, 4), (450, 8), (599.999, 16)]
)
def test_the_cap_doubles_every_quarter_of_the_ramp(elapsed: float, multiple: float) -> None:
    assert recovery_rate(POLICY, elapsed) == pytest.approx(100 / 60 * multiple, rel=1e-4)


@pytest.mark.parametrize("elapsed", [600.0, 601.0, 1e9, None])
def test_the_cap_lifts_at_the_end_of_the_ramp_or_without_one(elapsed: float | None) -> None:
    assert recovery_rate(POLICY, elapsed) is None


def test_off_means_no_cap_and_no_ramp() -> None:
    off = RecoveryPolicy(rate_per_s=None)
    assert recovery_rate(off, 0.0) is None
    assert not starts_recovery(off, 3600.0)
    assert allowed_between(off, 0.0, 60.0) == math.inf


def test_a_clock_step_back_is_the_start_of_the_ramp() -> None:
    assert recovery_rate(POLICY, -5.0) == POLICY.rate_per_s


def test_only_an_outage_of_at_least_after_s_starts_a_ramp() -> None:
    assert not starts_recovery(POLICY, 29.9)
    assert starts_recovery(POLICY, 30.0)


def test_the_first_minute_allows_a_little_more_than_the_rate() -> None:
    first = allowed_between(POLICY, 0.0, 60.0)
    assert 100 < first < 100 * 2 ** (4 * 60 / 600)  # between the start and the end cap


@given(
    st.floats(min_value=0, max_value=599),
    st.floats(min_value=0, max_value=599),
    st.floats(min_value=0, max_value=599),
)
def test_windows_add_up_and_never_go_below_the_starting_rate(a: float, b: float, c: float) -> None:
    a, b, c = sorted((a, b, c))
    whole = allowed_between(POLICY, a, c)
    assert whole == pytest.approx(
        allowed_between(POLICY, a, b) + allowed_between(POLICY, b, c), abs=1e-6
    )
    assert whole >= (c - a) * (POLICY.rate_per_s or 0) - 1e-6


def test_a_window_past_the_ramp_is_unbounded() -> None:
    assert allowed_between(POLICY, 580.0, 640.0) == math.inf


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"rate_per_s": 0.0}, "MAILBUS_RECOVERY_RATE"),
        ({"ramp_s": 0.0}, "MAILBUS_RECOVERY_RAMP"),
        ({"after_s": -1.0}, "MAILBUS_RECOVERY_AFTER"),
    ],
)
def test_bad_policies_name_the_setting(changes: dict[str, float], name: str) -> None:
    with pytest.raises(ConfigError) as error:
        RecoveryPolicy(**changes)  # type: ignore[arg-type]
    assert name in str(error.value)
