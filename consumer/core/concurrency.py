"""Adaptive concurrency: the in-flight limit follows the provider's latency (AIMD).

Each completed call reports its latency. A fast EWMA of recent latency is compared with a
baseline -- the lowest latency seen, allowed to creep upward very slowly so a permanent
change is eventually accepted. When recent latency exceeds ``tolerance`` times the
baseline, the provider is queueing: the limit is cut multiplicatively (at most once per
``decrease_every_s``). Otherwise the limit grows additively, by about one per ``limit``
calls, as TCP's congestion window does. The limit stays within [min_limit, max_limit].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["AdaptiveLimit", "LimitPolicy", "on_latency", "restart_slowly"]


@dataclass(frozen=True)
class LimitPolicy:
    min_limit: int = 1
    max_limit: int = 32
    tolerance: float = 2.0
    slack_s: float = 0.005  # latencies this close to the baseline are never "queueing"
    backoff_ratio: float = 0.8
    decrease_every_s: float = 0.5
    fast_alpha: float = 0.2
    baseline_creep: float = 0.001


@dataclass(frozen=True)
class AdaptiveLimit:
    limit: float
    recent_s: float | None = None
    baseline_s: float | None = None
    last_decrease: float = float("-inf")

    @property
    def slots(self) -> int:
        return max(1, int(self.limit))


def on_latency(
    state: AdaptiveLimit, latency_s: float, now: float, policy: LimitPolicy
) -> AdaptiveLimit:
    recent = (
        latency_s
        if state.recent_s is None
        else (state.recent_s + policy.fast_alpha * (latency_s - state.recent_s))
    )
    if state.baseline_s is None or latency_s < state.baseline_s:
        baseline = latency_s
    else:
        baseline = state.baseline_s + policy.baseline_creep * (latency_s - state.baseline_s)
    queueing = recent > policy.tolerance * baseline + policy.slack_s
    if queueing:
        if now - state.last_decrease < policy.decrease_every_s:
            return replace(state, recent_s=recent, baseline_s=baseline)
        limit = max(float(policy.min_limit), state.limit * policy.backoff_ratio)
        return AdaptiveLimit(limit, recent, baseline, now)
    limit = min(float(policy.max_limit), state.limit + 1.0 / max(state.limit, 1.0))
    return replace(state, limit=limit, recent_s=recent, baseline_s=baseline)


def restart_slowly(state: AdaptiveLimit, policy: LimitPolicy) -> AdaptiveLimit:
    """After an outage (the breaker closed again): start from the floor and ramp up."""
    return replace(state, limit=float(policy.min_limit))
