"""Recovery pacing as values: how fast the provider may be called after an outage.

When a provider comes back, the backlog of the outage must not hit it (and the receiving
mailbox providers) all at once: a burst from a sending domain that was silent gets it
throttled or blacklisted. So once a breaker closes after an outage of at least
``after_s``, sends are capped at ``rate_per_s`` (MAILBUS_RECOVERY_RATE), and the cap
doubles every quarter of ``ramp_s`` (MAILBUS_RECOVERY_RAMP): 1x, 2x, 4x, 8x, up to 16x at
the end of the ramp, when it lifts. The cap is continuous:

    cap(t) = rate * 2 ** (4 * t / ramp)     for 0 <= t < ramp, else no cap

so the sends allowed in a window ``[a, b]`` are its integral
(:func:`allowed_between`) plus the bucket's burst. A shorter outage (a blip the breaker
rode out in seconds) starts no ramp. Time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mailbus_client.errors import ConfigError

__all__ = [
    "DOUBLINGS",
    "RecoveryPolicy",
    "allowed_between",
    "recovery_rate",
    "starts_recovery",
]

DOUBLINGS = 4  # the cap doubles this many times over the ramp: it ends at 16x


@dataclass(frozen=True)
class RecoveryPolicy:
    """``rate_per_s`` None: recovery pacing is off. ``after_s``: the shortest outage (time
    the breaker was not closed) that starts a ramp."""

    rate_per_s: float | None = 100 / 60
    ramp_s: float = 600.0
    after_s: float = 30.0

    def __post_init__(self) -> None:
        rate = self.rate_per_s
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ConfigError("MAILBUS_RECOVERY_RATE", "must be a positive N/min, or 0 (off)")
        if not (math.isfinite(self.ramp_s) and self.ramp_s > 0):
            raise ConfigError("MAILBUS_RECOVERY_RAMP", "must be a positive duration")
        if not (math.isfinite(self.after_s) and self.after_s >= 0):
            raise ConfigError("MAILBUS_RECOVERY_AFTER", "must be a duration >= 0")


def starts_recovery(policy: RecoveryPolicy, outage_s: float) -> bool:
    """Whether a breaker that closed after ``outage_s`` seconds not closed starts a ramp."""
    return policy.rate_per_s is not None and outage_s >= policy.after_s


def recovery_rate(policy: RecoveryPolicy, elapsed_s: float | None) -> float | None:
    """The cap in sends per second ``elapsed_s`` after the ramp started; None when there is
    none (pacing off, no ramp started, or the ramp is over)."""
    if policy.rate_per_s is None or elapsed_s is None or elapsed_s >= policy.ramp_s:
        return None
    elapsed = max(elapsed_s, 0.0)
    return policy.rate_per_s * 2 ** (DOUBLINGS * elapsed / policy.ramp_s)


def allowed_between(policy: RecoveryPolicy, start_s: float, end_s: float) -> float:
    """The integral of the cap over ``[start_s, end_s]`` (seconds since the ramp started),
    the sends the cap allows in that window besides the bucket's burst; ``inf`` if the
    window reaches past the ramp or pacing is off."""
    if policy.rate_per_s is None or end_s > policy.ramp_s:
        return math.inf
    a, b = max(start_s, 0.0), max(end_s, 0.0)
    k = DOUBLINGS * math.log(2) / policy.ramp_s  # cap(t) = rate * e^(k t)
    return policy.rate_per_s * (math.exp(k * b) - math.exp(k * a)) / k
