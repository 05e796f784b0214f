"""How many recipients a campaign may hand out now: rate, sending window, daily caps.

Pure functions over values; the caller passes PostgreSQL's ``now()`` (one clock). A
campaign holds a token bucket (``Bucket``): tokens arrive at ``rate_per_min / 60`` a
second while the window is open, up to ``burst_s`` seconds' worth; each recipient handed
out (row created or suppressed) spends one. Outside the window nothing accrues, so the
first tick after it opens does not release a burst. Daily caps (a fixed ``daily_cap`` and
a warm-up schedule of rising caps, day 1 being the UTC day the campaign started) bound the
recipients handed out per UTC day.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time

from mailbus.campaigns.errors import CampaignInputError

__all__ = [
    "Bucket",
    "Grant",
    "Pace",
    "Window",
    "fair_shares",
    "parse_rate",
    "parse_warmup",
    "parse_window",
    "plan_tick",
    "settle",
]

_RATE = re.compile(r"^\s*(\d+)\s*(?:/\s*(s|sec|min|m|h|hour))?\s*$")
_PER_MINUTE = {None: 1.0, "min": 1.0, "m": 1.0, "s": 60.0, "sec": 60.0, "h": 1 / 60, "hour": 1 / 60}
_WINDOW = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


def parse_rate(text: str) -> int:
    """``600/min`` (also ``10/s``, ``36000/h``, a bare number = per minute) → per minute."""
    match = _RATE.match(text)
    if match is None:
        raise CampaignInputError("--rate", f"expected N/min (or N/s, N/h), got {text!r}")
    per_minute = int(match.group(1)) * _PER_MINUTE[match.group(2)]
    if per_minute < 1:
        raise CampaignInputError("--rate", f"at least 1/min, got {text!r}")
    return math.floor(per_minute)


@dataclass(frozen=True)
class Window:
    """A daily sending window in UTC; ``end`` before ``start`` wraps past midnight."""

    start: time
    end: time

    def contains(self, at: time) -> bool:
        if self.start < self.end:
            return self.start <= at < self.end
        return at >= self.start or at < self.end

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


def parse_window(text: str) -> Window:
    """``HH:MM-HH:MM`` in UTC."""
    match = _WINDOW.match(text)
    if match is None:
        raise CampaignInputError("--window", f"expected HH:MM-HH:MM (UTC), got {text!r}")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        raise CampaignInputError("--window", f"not a time of day in {text!r}")
    window = Window(time(h1, m1), time(h2, m2))
    if window.start == window.end:
        raise CampaignInputError("--window", f"start and end are equal in {text!r}")
    return window


def parse_warmup(text: str) -> tuple[int, ...]:
    """``500,2000,10000``: at most 500 recipients on day 1, 2000 on day 2, ...; after the
    last day only ``--daily-cap`` (if any) applies."""
    parts = [part.strip() for part in text.split(",")]
    if not parts or any(not part.isdigit() or int(part) < 1 for part in parts):
        raise CampaignInputError(
            "--warmup", f"expected daily caps like 500,2000,10000, got {text!r}"
        )
    return tuple(int(part) for part in parts)


@dataclass(frozen=True)
class Pace:
    rate_per_min: int
    window: Window | None = None
    daily_cap: int | None = None
    warmup: tuple[int, ...] = ()

    def cap_for_day(self, day_index: int) -> int | None:
        """The cap of the ``day_index``-th UTC day since the start (0 = the start day)."""
        caps = [] if self.daily_cap is None else [self.daily_cap]
        if 0 <= day_index < len(self.warmup):
            caps.append(self.warmup[day_index])
        return min(caps) if caps else None


@dataclass(frozen=True)
class Bucket:
    tokens: float = 0.0
    last_tick_at: datetime | None = None
    day: date | None = None  # the UTC day day_count counts
    day_count: int = 0


@dataclass(frozen=True)
class Grant:
    rows: int  # recipients to hand out now
    bucket: Bucket  # the bucket before spending (refilled, day rolled): pass to settle()
    limited_by: str  # "rate", "window", "daily cap" or "batch" (more is owed at once)


def plan_tick(
    pace: Pace,
    bucket: Bucket,
    now: datetime,
    started_on: date,
    max_batch: int,
    burst_s: float = 2.0,
) -> Grant:
    """The recipients a tick at ``now`` may hand out, and the refilled bucket."""
    now = now.astimezone(UTC)
    today = now.date()
    day_count = bucket.day_count if bucket.day == today else 0
    per_second = pace.rate_per_min / 60.0
    capacity = max(2.0, per_second * burst_s)  # >= 2: a fraction over 1 is kept
    if pace.window is not None and not pace.window.contains(now.time()):
        refilled = Bucket(0.0, now, today, day_count)
        return Grant(0, refilled, "window")
    if bucket.last_tick_at is None:  # started or resumed: one second's worth (>= 1) at once
        tokens = min(capacity, max(bucket.tokens, 1.0, per_second))
    else:
        elapsed = max(0.0, (now - bucket.last_tick_at).total_seconds())
        tokens = min(capacity, bucket.tokens + elapsed * per_second)
    refilled = Bucket(tokens, now, today, day_count)
    rows, limited_by = math.floor(tokens), "rate"
    cap = pace.cap_for_day((today - started_on).days)
    if cap is not None and cap - day_count <= rows:
        rows, limited_by = max(0, cap - day_count), "daily cap"
    if rows > max_batch:
        rows, limited_by = max_batch, "batch"
    return Grant(rows, refilled, limited_by)


def settle(grant: Grant, used: int) -> Bucket:
    """The bucket after ``used`` (<= ``grant.rows``) recipients were handed out."""
    spent = min(used, grant.rows)
    return replace(
        grant.bucket,
        tokens=max(0.0, grant.bucket.tokens - spent),
        day_count=grant.bucket.day_count + spent,
    )


def fair_shares(capacity: int, demands: list[int]) -> list[int]:
    """Max-min fair shares of ``capacity`` among ``demands`` (pure): nobody gets more than
    it asks; what a small demand leaves is shared by the bigger ones, equally; the units
    an equal split cannot divide go one each to the first unsatisfied demands. The shares
    add up to ``min(capacity, sum(demands))``."""
    shares = [0] * len(demands)
    left = max(0, capacity)
    open_ = sorted(range(len(demands)), key=lambda i: (demands[i], i))
    while open_ and left > 0:
        level = left // len(open_)
        smallest = demands[open_[0]] - shares[open_[0]]
        if level >= smallest:  # the smallest demand is met in full: settle it, share again
            for i in open_:
                shares[i] += smallest
            left -= smallest * len(open_)
            open_ = [i for i in open_ if shares[i] < demands[i]]
            continue
        for i in open_:
            shares[i] += level
        left -= level * len(open_)
        for i in sorted(open_)[:left]:  # the indivisible rest: one each, in campaign order
            shares[i] += 1
        left = 0
    return shares
