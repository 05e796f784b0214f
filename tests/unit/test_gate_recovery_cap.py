"""The gate starts the shared recovery ramp when its breaker closes after an outage, and
every send after that (not the probe) passes the recovery cap, P0 ones marked as such."""

from __future__ import annotations

import asyncio

import pytest

from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.outcome import Classification, Outcome
from mailbus.consumer.core.recovery import RecoveryPolicy
from mailbus.consumer.gate import ProviderGate

FAILED = Classification(Outcome.RETRY, status_code=503)
OK = Classification(Outcome.ACCEPTED, message_id="m", status_code=200)


class FakePacer:
    def __init__(self, after_s: float) -> None:
        self.policy = RecoveryPolicy(rate_per_s=1.0, ramp_s=60.0, after_s=after_s)
        self.started = 0
        self.acquired: list[bool] = []

    async def start(self) -> None:
        self.started += 1

    async def acquire(self, p0: bool) -> None:
        self.acquired.append(p0)

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("outage_s", "ramps"), [(10.0, False), (30.0, True), (300.0, True)])
def test_a_ramp_starts_only_after_an_outage_long_enough(outage_s: float, ramps: bool) -> None:
    clock, pacer = Clock(), FakePacer(after_s=30.0)
    gate = ProviderGate(
        4,
        BreakerPolicy(failure_threshold=1, cool_down_s=1.0, max_cool_down_s=1.0),
        None,
        on_breaker_change=lambda _s: None,
        on_limit_change=lambda _l: None,
        clock=clock,
        recovery=pacer,  # type: ignore[arg-type]
    )

    async def scenario() -> None:
        gate.settle(await gate.admit_send(), FAILED, 0.1)  # opens the breaker
        assert gate.breaker.state is BreakerState.OPEN
        assert pacer.acquired == [False]  # a send before the outage passes the (idle) cap
        clock.now += outage_s
        probe = await gate.admit_send()
        assert probe.probe and pacer.acquired == [False]  # the probe is not capped
        gate.settle(probe, OK, 0.1)
        assert gate.breaker.state is BreakerState.CLOSED
        gate.settle(await gate.admit_send(p0=True), OK, 0.1)
        gate.settle(await gate.admit_send(), OK, 0.1)

    asyncio.run(scenario())
    assert pacer.started == (1 if ramps else 0)
    assert pacer.acquired == [False, True, False]
