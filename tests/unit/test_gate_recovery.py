"""Who probes a recovering provider: transactional mail first, newsletters when alone."""

from __future__ import annotations

import asyncio
import time

from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.outcome import Classification, Outcome
from mailbus.consumer.gate import ProviderGate

FAILED = Classification(Outcome.RETRY, status_code=503)
OK = Classification(Outcome.ACCEPTED, message_id="m", status_code=200)


def gate_with_a_quick_breaker(unhurried_delay_s: float | None = None) -> ProviderGate:
    """A gate whose breaker opens on one failure and cools down in 50 ms."""
    delay = {} if unhurried_delay_s is None else {"unhurried_delay_s": unhurried_delay_s}
    return ProviderGate(
        4,
        BreakerPolicy(failure_threshold=1, cool_down_s=0.05, max_cool_down_s=0.05),
        None,
        on_breaker_change=lambda _state: None,
        on_limit_change=lambda _limit: None,
        **delay,
    )


def admits_within(gate: ProviderGate, seconds: float) -> bool:
    async def admitted() -> bool:
        try:
            await asyncio.wait_for(gate.admit_send(), seconds)
        except TimeoutError:
            return False
        return True

    return asyncio.run(admitted())


def open_gate() -> ProviderGate:
    gate = gate_with_a_quick_breaker(unhurried_delay_s=0.0)
    gate.settle(asyncio.run(gate.admit_send()), FAILED, 0.1)
    assert gate.breaker.state is BreakerState.OPEN
    return gate


def test_a_newsletter_alone_probes_the_open_breaker_and_closes_it() -> None:
    # Before: it waited for transactional mail to probe, forever in a p2-only process.
    gate = open_gate()

    async def newsletter() -> None:
        admission = await asyncio.wait_for(gate.admit_send(unhurried=True), 5)
        assert gate.breaker.state is BreakerState.HALF_OPEN  # it carries the probe
        gate.settle(admission, OK, 0.1)

    asyncio.run(newsletter())
    assert gate.breaker.state is BreakerState.CLOSED


def test_transactional_mail_waiting_takes_the_probe_before_a_newsletter() -> None:
    gate = open_gate()
    order: list[str] = []

    async def send(name: str, unhurried: bool) -> None:
        admission = await gate.admit_send(unhurried=unhurried)
        order.append(name)
        await asyncio.sleep(0.05)  # the call
        gate.settle(admission, OK, 0.05)

    async def scenario() -> None:
        newsletter = asyncio.create_task(send("newsletter", True))
        await asyncio.sleep(0)  # the newsletter is waiting first
        await asyncio.wait_for(asyncio.gather(newsletter, send("password_reset", False)), 5)

    asyncio.run(scenario())
    assert order == ["password_reset", "newsletter"]


def test_an_admission_lapses_when_the_breaker_opens_before_its_call_but_a_probe_holds() -> None:
    gate = gate_with_a_quick_breaker()
    waiting = asyncio.run(gate.admit_send())  # admitted while closed, then waits for a permit
    gate.settle(asyncio.run(gate.admit_send()), FAILED, 0.1)  # another call opens the breaker
    assert not gate.holds(waiting)  # it must wait at the gate again, not call
    time.sleep(0.06)
    probe = asyncio.run(gate.admit_send())
    assert probe.probe and gate.holds(probe)


def test_a_lapsed_admission_handed_back_leaves_the_probe_out() -> None:
    # Before: release() of an admission that was not the probe cleared probe_out while the
    # real probe was still in flight, so a second probe went to the recovering provider.
    gate = gate_with_a_quick_breaker()
    lapsed = asyncio.run(gate.admit_send())  # admitted while closed, waits for a permit
    gate.settle(asyncio.run(gate.admit_send()), FAILED, 0.1)  # another call opens it
    time.sleep(0.06)
    probe = asyncio.run(gate.admit_send())  # the one probe, now in flight
    assert probe.probe and gate.breaker.probe_out
    assert not gate.holds(lapsed)
    gate.release(lapsed)  # service._attempt: `continue`, the finally hands it back
    assert gate.breaker.probe_out

    assert not admits_within(gate, 0.3)  # no second probe while the first is out
    gate.settle(probe, OK, 0.1)
    assert gate.breaker.state is BreakerState.CLOSED


def test_a_late_reply_to_a_call_from_before_the_outage_is_not_the_probes() -> None:
    # Before: a call admitted while closed that failed after the probe went out reopened the
    # breaker with probe_out cleared, so a second probe went out while the first was in flight.
    gate = gate_with_a_quick_breaker()
    stale = asyncio.run(gate.admit_send())  # in flight when the breaker opens
    gate.settle(asyncio.run(gate.admit_send()), FAILED, 0.1)
    time.sleep(0.06)
    probe = asyncio.run(gate.admit_send())
    assert probe.probe
    gate.settle(stale, FAILED, 0.1)  # its reply comes late
    assert gate.breaker.state is BreakerState.HALF_OPEN and gate.breaker.probe_out
    time.sleep(0.06)

    assert not admits_within(gate, 0.3)
    gate.settle(probe, OK, 0.1)
    assert gate.breaker.state is BreakerState.CLOSED
