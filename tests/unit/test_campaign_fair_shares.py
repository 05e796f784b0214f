"""Max-min fair sharing of the daily quota across running campaigns (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.campaigns.pacing import fair_shares


@pytest.mark.parametrize(
    ("capacity", "demands", "shares"),
    [
        (100, [500, 20, 500], [40, 20, 40]),  # the small one is met, the rest split equally
        (100, [500, 500, 500], [34, 33, 33]),  # the indivisible unit goes to the first
        (1000, [10, 20, 30], [10, 20, 30]),  # enough for all: everyone gets its demand
        (0, [10, 20], [0, 0]),  # quota spent: nobody
        (-5, [10], [0]),
        (7, [], []),
        (10, [0, 10], [0, 10]),  # a campaign that asks nothing leaves its part
    ],
)
def test_examples(capacity: int, demands: list[int], shares: list[int]) -> None:
    assert fair_shares(capacity, demands) == shares


@given(st.integers(-10, 10_000), st.lists(st.integers(0, 5_000), max_size=12))
def test_max_min_fairness(capacity: int, demands: list[int]) -> None:
    shares = fair_shares(capacity, demands)
    assert len(shares) == len(demands)
    assert all(0 <= s <= d for s, d in zip(shares, demands, strict=True))  # never over demand
    assert sum(shares) == min(max(capacity, 0), sum(demands))  # nothing wasted, never over
    for i, share in enumerate(shares):
        if share < demands[i]:  # a campaign left wanting got at least what any other got, -1
            assert all(share >= other - 1 for other in shares)


@given(st.integers(0, 10_000), st.lists(st.integers(0, 5_000), min_size=1, max_size=12))
def test_raising_the_quota_never_lowers_a_share(capacity: int, demands: list[int]) -> None:
    before = fair_shares(capacity, demands)
    after = fair_shares(capacity + 1, demands)
    assert all(b <= a for b, a in zip(before, after, strict=True))
