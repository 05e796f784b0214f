"""The pacing maths over simulated time: rate per tick, burst bound, window, daily caps."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.pacing import (
    Bucket,
    Pace,
    Window,
    parse_rate,
    parse_warmup,
    parse_window,
    plan_tick,
    settle,
)

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def simulate(
    pace: Pace,
    ticks: list[datetime],
    *,
    audience: int = 10**9,
    max_batch: int = 10**9,
) -> list[int]:
    """Rows handed out at each tick, the bucket carried from tick to tick like the pacer."""
    bucket, left, out = Bucket(), audience, []
    for now in ticks:
        grant = plan_tick(pace, bucket, now, START.date(), max_batch)
        used = min(grant.rows, left)
        left -= used
        bucket = settle(grant, used)
        out.append(used)
    return out


def every(seconds: float, total_s: float, start: datetime = START) -> list[datetime]:
    n = int(total_s / seconds)
    return [start + timedelta(seconds=seconds * i) for i in range(n + 1)]


@pytest.mark.parametrize(
    ("text", "per_min"),
    [("600/min", 600), ("600", 600), ("10/s", 600), ("36000/h", 600), (" 5 / min ", 5)],
)
def test_parse_rate(text: str, per_min: int) -> None:
    assert parse_rate(text) == per_min


@pytest.mark.parametrize("text", ["", "0/min", "fast", "-5/min", "10/day", "30/h"])
def test_parse_rate_rejects(text: str) -> None:
    with pytest.raises(CampaignError, match="--rate"):
        parse_rate(text)


def test_parse_window_and_wrap_past_midnight() -> None:
    day = parse_window("09:00-17:30")
    assert day == Window(time(9), time(17, 30)) and str(day) == "09:00-17:30"
    assert day.contains(time(9)) and day.contains(time(17, 29))
    assert not day.contains(time(17, 30)) and not day.contains(time(8, 59))
    night = parse_window("22:00-06:00")
    assert night.contains(time(23)) and night.contains(time(5, 59))
    assert not night.contains(time(6)) and not night.contains(time(12))


@pytest.mark.parametrize("text", ["9-17", "25:00-01:00", "10:00-10:00", "10:60-11:00"])
def test_parse_window_rejects(text: str) -> None:
    with pytest.raises(CampaignError, match="--window"):
        parse_window(text)


def test_parse_warmup() -> None:
    assert parse_warmup("500, 2000,10000") == (500, 2000, 10000)
    with pytest.raises(CampaignError, match="--warmup"):
        parse_warmup("500,,x")


def test_600_per_minute_in_one_second_ticks_is_10_a_tick() -> None:
    out = simulate(Pace(600), every(1.0, 60))
    assert out[0] == 10  # one second's worth goes at once
    assert out[1:] == [10] * 60
    assert sum(out) == 610


@pytest.mark.parametrize("tick_s", [0.1, 0.37, 1.0, 1.9])
def test_rate_holds_within_one_percent_over_a_minute_whatever_the_tick(tick_s: float) -> None:
    ticks = every(tick_s, 60)
    expected = 10 + 10 * (ticks[-1] - ticks[0]).total_seconds()
    assert expected * 0.99 <= sum(simulate(Pace(600), ticks)) <= expected


def test_slow_rates_accumulate_fractions() -> None:
    out = simulate(Pace(7), every(1.0, 600))  # 7 a minute, ticks every second
    assert sum(out) == 1 + 70
    assert max(out) == 1


def test_a_long_gap_releases_at_most_the_burst() -> None:
    pace = Pace(600)
    ticks = [START, START + timedelta(seconds=1), START + timedelta(hours=1)]
    assert simulate(pace, ticks) == [10, 10, 20]  # 2 s worth, not an hour's 36,000


def test_big_grants_are_cut_into_batches() -> None:
    grant = plan_tick(
        Pace(6_000_000),
        Bucket(0.0, START),
        START + timedelta(seconds=1),
        START.date(),
        max_batch=20_000,
    )
    assert grant.rows == 20_000 and grant.limited_by == "batch"


def test_nothing_outside_the_window_and_no_burst_when_it_opens() -> None:
    pace = Pace(60, window=Window(time(13), time(13, 10)))
    ticks = every(1.0, 3600)  # 12:00 to 13:00 then on to 13:00 + ...
    out = simulate(pace, ticks + every(1.0, 1800, START + timedelta(hours=1, seconds=1)))
    before = sum(out[: len(ticks) - 1])
    assert before == 0  # 12:00-12:59:59 is outside
    opened = out[len(ticks) - 1 :]
    assert opened[:3] == [1, 1, 1]  # from 13:00:00, one a second: no burst
    assert 595 <= sum(opened) <= 600  # ten minutes at 60/min, then closed again


def test_daily_cap_holds_and_resets_at_utc_midnight() -> None:
    pace = Pace(6000, daily_cap=250)
    ticks = every(10.0, 36 * 3600)  # 36 hours from noon: today and all of tomorrow
    out = simulate(pace, ticks)
    first_day = [n for t, n in zip(ticks, out, strict=True) if t.date() == START.date()]
    next_day = START.date() + timedelta(days=1)
    second_day = [n for t, n in zip(ticks, out, strict=True) if t.date() == next_day]
    assert sum(first_day) == 250
    assert sum(second_day) == 250


def test_warmup_caps_rise_day_by_day_then_the_daily_cap_rules() -> None:
    pace = Pace(600, daily_cap=300, warmup=(50, 120, 1000))
    ticks = every(60.0, 5 * 86400)
    out = simulate(pace, ticks)
    by_day: dict[date, int] = {}
    for moment, n in zip(ticks, out, strict=True):
        by_day[moment.date()] = by_day.get(moment.date(), 0) + n
    assert list(by_day.values())[:5] == [50, 120, 300, 300, 300]


def test_settle_spends_only_what_was_used() -> None:
    grant = plan_tick(
        Pace(600), Bucket(0.0, START), START + timedelta(seconds=1), START.date(), 1000
    )
    assert grant.rows == 10
    after = settle(grant, 4)  # the audience ran out
    assert after.tokens == pytest.approx(6.0) and after.day_count == 4


@given(
    rate=st.integers(min_value=1, max_value=100_000),
    gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=200),
)
def test_never_more_than_the_rate_allows(rate: int, gaps: list[float]) -> None:
    ticks, now = [START], START
    for gap in gaps:
        now += timedelta(seconds=gap)
        ticks.append(now)
    out = simulate(Pace(rate), ticks)
    elapsed = (ticks[-1] - ticks[0]).total_seconds()
    assert sum(out) <= max(1, rate / 60) + rate / 60 * elapsed + 1e-6
    assert all(n >= 0 for n in out)
