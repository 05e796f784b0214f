"""When to try again: capped exponential backoff with "equal jitter", Retry-After a floor.

For the n-th provider call (``attempts`` = n >= 1) the ceiling is
``d = min(cap, base * 2**(n-1))`` and the delay is uniform in ``[d/2, d]``. Half the delay
is fixed, so delays grow steadily and never shrink from one attempt to the next while the
ceiling is still doubling; the jittered half spreads a burst of failures so the retries do
not arrive together. A provider's Retry-After is a minimum, never shortened by the
jitter. With a ``schedule`` (MAILBUS_RETRY_SCHEDULE, e.g. ``5m,30m,2h,24h``) the n-th
retry waits the n-th delay (plus up to 10% jitter, Retry-After still a minimum) and the
call after the last one is the last: ``max_attempts`` is then ``len(schedule) + 1``.
Randomness is injected (``rand`` returns a float in ``[0, 1)``, e.g.
``random.Random().random``) so tests and replays are deterministic.

A provider's *quota* (a daily or monthly sending quota,
docs/providers.md#account-sender-and-quota-replies) is not a rate limit: the next try of a
mail that met it waits :func:`quota_wait`, at least ``quota_pause_s``
(MAILBUS_QUOTA_PAUSE) or a longer Retry-After, whatever its attempt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mailbus.consumer.core.outcome import MAX_RETRY_AFTER_S
from mailbus_client.errors import ConfigError

__all__ = [
    "RetryPolicy",
    "backoff_ceiling",
    "quota_wait",
    "retry_delay",
    "with_schedule",
]

# 2**1000 times any sane base is far past any sane cap, and still a finite float.
_MAX_EXPONENT = 1000
_SCHEDULE_JITTER = 0.1


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` provider calls before a row is failed; ``base_s`` is the ceiling of
    the first retry delay, doubling up to ``cap_s`` (MAILBUS_MAX_ATTEMPTS,
    MAILBUS_BACKOFF_BASE, MAILBUS_BACKOFF_CAP). ``late_accept_s``
    (MAILBUS_LATE_ACCEPT_WINDOW): how long after a call with no known outcome the provider
    may still accept it; a "not found" look-up ends such a mail in a final state other than
    ``accepted`` only once that window has passed."""

    max_attempts: int = 8
    base_s: float = 2.0
    cap_s: float = 300.0
    late_accept_s: float = 30.0
    schedule: tuple[float, ...] = ()  # explicit retry delays in seconds; () = exponential
    max_age_s: float | None = None  # MAILBUS_MAX_AGE: no retry this long after created_at
    quota_pause_s: float = 3600.0  # MAILBUS_QUOTA_PAUSE: the next try after a quota reply

    def __post_init__(self) -> None:
        if any(not (math.isfinite(d) and d > 0) for d in self.schedule):
            raise ConfigError("MAILBUS_RETRY_SCHEDULE", "every delay must be positive")
        if self.schedule and self.max_attempts != len(self.schedule) + 1:
            raise ConfigError("MAILBUS_RETRY_SCHEDULE", "needs max_attempts = delays + 1")
        if self.max_attempts < 1:
            raise ConfigError("MAILBUS_MAX_ATTEMPTS", "must be at least 1")
        if not (math.isfinite(self.base_s) and self.base_s > 0):
            raise ConfigError("MAILBUS_BACKOFF_BASE", "must be a positive number of seconds")
        if not (math.isfinite(self.cap_s) and self.cap_s >= self.base_s):
            raise ConfigError("MAILBUS_BACKOFF_CAP", "must be a number of seconds >= the base")
        age = self.max_age_s
        if age is not None and not (math.isfinite(age) and age > 0):
            raise ConfigError("MAILBUS_MAX_AGE", "must be a positive duration")
        if not (math.isfinite(self.late_accept_s) and self.late_accept_s >= 0):
            raise ConfigError("MAILBUS_LATE_ACCEPT_WINDOW", "must be a number of seconds >= 0")
        if not (math.isfinite(self.quota_pause_s) and self.quota_pause_s > 0):
            raise ConfigError("MAILBUS_QUOTA_PAUSE", "must be a positive duration")


def backoff_ceiling(attempts: int, policy: RetryPolicy) -> float:
    """``min(cap, base * 2**(attempts-1))``; ``attempts`` below 1 counts as 1."""
    exponent = min(max(attempts, 1) - 1, _MAX_EXPONENT)
    return min(policy.cap_s, math.ldexp(policy.base_s, exponent))


def retry_delay(
    attempts: int,
    policy: RetryPolicy,
    rand: Callable[[], float],
    retry_after_s: float | None = None,
) -> float:
    """Seconds to wait after the ``attempts``-th call: in ``[d/2, d]`` for the ceiling ``d``,
    and never less than ``retry_after_s`` (clamped to ``MAX_RETRY_AFTER_S``; NaN ignored).

    ``rand()`` is clamped into ``[0, 1]``, so a faulty source cannot break the bounds.
    """
    r = rand()
    r = 0.0 if math.isnan(r) else min(max(r, 0.0), 1.0)
    if policy.schedule:
        step = policy.schedule[min(max(attempts, 1), len(policy.schedule)) - 1]
        delay = step * (1 + _SCHEDULE_JITTER * r)
    else:
        ceiling = backoff_ceiling(attempts, policy)
        delay = ceiling / 2 + r * ceiling / 2
    if retry_after_s is not None and not math.isnan(retry_after_s):
        delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
    return delay


def quota_wait(policy: RetryPolicy, retry_after_s: float | None) -> float:
    """Seconds before the next try of a mail the provider refused for a sending quota: the
    provider's Retry-After where it is longer (clamped to ``MAX_RETRY_AFTER_S``), else
    ``quota_pause_s``. A rate-limit header on a quota reply (Resend sends its
    ``retry-after`` with every 429) is shorter than any quota, so it never shortens it."""
    if retry_after_s is None or math.isnan(retry_after_s):
        return policy.quota_pause_s
    return max(policy.quota_pause_s, min(retry_after_s, MAX_RETRY_AFTER_S))


def with_schedule(policy: RetryPolicy, schedule: tuple[float, ...]) -> RetryPolicy:
    """``policy`` with an explicit schedule (and ``max_attempts`` = delays + 1); the cap grows
    to the longest delay, so a wait for a look-up is never capped below the schedule."""
    if not schedule:
        return policy
    return replace(
        policy,
        max_attempts=len(schedule) + 1,
        cap_s=max(policy.cap_s, max(schedule)),
        schedule=schedule,
    )
