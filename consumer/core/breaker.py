"""A circuit breaker for one provider, as a value: closed → open → half-open → closed.

Closed: calls flow; a run of ``failure_threshold`` consecutive failures (retryable errors
and timeouts) opens it. Open: nothing is sent until ``cool_down_s`` has passed; then one
probe is admitted (half-open). The probe's success closes the breaker; its failure opens
it again with a doubled cool-down (up to ``max_cool_down_s``). Time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["Breaker", "BreakerPolicy", "BreakerState", "admit", "record"]


class BreakerState(StrEnum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 5
    cool_down_s: float = 5.0
    max_cool_down_s: float = 60.0


@dataclass(frozen=True)
class Breaker:
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: float = 0.0
    cool_down_s: float = 0.0
    probe_out: bool = False


def admit(breaker: Breaker, now: float) -> tuple[Breaker, bool]:
    """May a call go out now? Returns the (possibly changed) breaker and the answer."""
    if breaker.state is BreakerState.CLOSED:
        return breaker, True
    if breaker.state is BreakerState.OPEN:
        if now - breaker.opened_at < breaker.cool_down_s:
            return breaker, False
        return replace(breaker, state=BreakerState.HALF_OPEN, probe_out=True), True
    if breaker.probe_out:  # half-open: one probe at a time
        return breaker, False
    return replace(breaker, probe_out=True), True


def record(breaker: Breaker, succeeded: bool, now: float, policy: BreakerPolicy) -> Breaker:
    """Account for the result of an admitted call."""
    if succeeded:
        return Breaker()
    if breaker.state is BreakerState.HALF_OPEN:
        cool_down = min(policy.max_cool_down_s, max(breaker.cool_down_s, policy.cool_down_s) * 2)
        return Breaker(BreakerState.OPEN, breaker.consecutive_failures + 1, now, cool_down)
    if breaker.state is BreakerState.OPEN:
        return breaker  # a call admitted before the breaker opened: already counted
    failures = breaker.consecutive_failures + 1
    if failures >= policy.failure_threshold:
        return Breaker(BreakerState.OPEN, failures, now, policy.cool_down_s)
    return replace(breaker, consecutive_failures=failures)
