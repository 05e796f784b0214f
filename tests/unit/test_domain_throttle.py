"""Per-recipient-domain throttling: which replies throttle a domain, the pause it gets,
and that other domains (and the sender as a whole) are not slowed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.domains import (
    DomainPause,
    DomainPolicy,
    clear,
    deferred,
    domain_throttled,
    pause_left,
    recipient_domain,
    throttle,
)
from mailbus.consumer.core.outcome import Classification, Outcome, ProviderReply, classify
from mailbus.consumer.core.smtp_outcome import SmtpReply, classify_smtp
from mailbus.consumer.core.states import Status
from mailbus.consumer.gate import Admission, ProviderGate

POLICY = DomainPolicy(base_s=5.0, cap_s=60.0)
OK = Classification(Outcome.ACCEPTED, message_id="m", status_code=200)


@pytest.mark.parametrize(
    ("address", "domain"),
    [("Ana@Example.COM", "example.com"), ('"a@b"@c.org', "c.org"), ("nobody", "")],
)
def test_recipient_domain(address: str, domain: str) -> None:
    assert recipient_domain(address) == domain


@pytest.mark.parametrize(
    ("result", "throttles"),
    [
        (classify_smtp(SmtpReply(421, "4.7.0 try again later", "rcpt")), True),
        (classify_smtp(SmtpReply(452, "4.2.2 mailbox full", "rcpt")), True),
        (classify_smtp(SmtpReply(451, "4.3.0 local error")), False),
        (classify_smtp(SmtpReply(550, "5.1.1 no such user")), False),
        (classify(ProviderReply(429, retry_after_s=2.0, domain_scoped=True)), True),
        (classify(ProviderReply(429, retry_after_s=2.0)), False),  # the API's own limit
        (classify(ProviderReply(503, domain_scoped=True)), False),  # only a 429 is scoped
    ],
)
def test_which_replies_throttle_the_recipient_domain(
    result: Classification, throttles: bool
) -> None:
    assert domain_throttled(result) is throttles


def test_a_throttle_pauses_only_that_domain_doubling_in_a_row() -> None:
    pauses = throttle({}, "slow.example", 100.0, None, POLICY)
    assert pause_left(pauses, "slow.example", 100.0) == 5.0
    assert pause_left(pauses, "fast.example", 100.0) == 0.0
    pauses = throttle(pauses, "slow.example", 105.0, None, POLICY)
    assert pause_left(pauses, "slow.example", 105.0) == 10.0
    now = 115.0
    for _ in range(10):
        pauses = throttle(pauses, "slow.example", now, None, POLICY)
        now += pause_left(pauses, "slow.example", now)
    assert (
        pause_left(throttle(pauses, "slow.example", now, None, POLICY), "slow.example", now) == 60
    )


def test_throttles_of_calls_in_flight_together_count_once() -> None:
    # Before: eight 429s arriving together made eight strikes, a pause of 5 * 2**7 s.
    pauses = throttle({}, "slow.example", 0.0, None, POLICY)
    for _ in range(7):
        pauses = throttle(pauses, "slow.example", 0.1, None, POLICY)
    assert pause_left(pauses, "slow.example", 0.1) == pytest.approx(4.9)
    longer = throttle(pauses, "slow.example", 0.2, 30.0, POLICY)  # its Retry-After still counts
    assert pause_left(longer, "slow.example", 0.2) == 30.0


def test_retry_after_is_a_minimum_and_an_accept_clears_the_run() -> None:
    pauses = throttle({}, "slow.example", 0.0, 30.0, POLICY)
    assert pause_left(pauses, "slow.example", 0.0) == 30.0
    pauses = clear(pauses, "slow.example")
    assert pause_left(pauses, "slow.example", 0.0) == 0.0
    assert pause_left(throttle(pauses, "slow.example", 0.0, None, POLICY), "slow.example", 0) == 5


def test_the_pauses_kept_are_bounded() -> None:
    small = DomainPolicy(base_s=1.0, cap_s=1.0, max_domains=3)
    pauses: dict[str, DomainPause] = {}
    for n in range(10):
        pauses = throttle(pauses, f"d{n}.example", float(n * 10), None, small)
    assert len(pauses) <= 3
    assert "d9.example" in pauses


def test_a_deferred_mail_stays_pending_until_the_pause_ends() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    decision = deferred("slow.example", 7.5, now)
    assert decision.next_status is Status.PENDING
    assert decision.retry_at == now + timedelta(seconds=7.5)
    assert not decision.dead_letter and "slow.example" in decision.reason


def test_the_gate_pauses_the_domain_not_the_process_nor_the_breaker() -> None:
    now = [0.0]
    gate = ProviderGate(
        4,
        BreakerPolicy(failure_threshold=1),
        None,
        on_breaker_change=lambda _s: None,
        on_limit_change=lambda _l: None,
        clock=lambda: now[0],
    )
    scoped = classify(ProviderReply(429, retry_after_s=3.0, domain_scoped=True))
    gate.settle(gate_admission(gate), scoped, 0.01, "slow.example")
    assert gate.domain_pause("slow.example") == 5.0  # the backoff's base beats Retry-After 3
    assert gate.domain_pause("fast.example") == 0.0
    assert gate.breaker.state is BreakerState.CLOSED  # the provider itself is fine
    assert gate._paused_until == 0.0  # no process-wide 429 pause
    gate.settle(gate_admission(gate), OK, 0.01, "slow.example")
    assert gate.domain_pause("slow.example") == 0.0
    gate.settle(gate_admission(gate), classify(ProviderReply(429, retry_after_s=3.0)), 0.01, "x")
    assert gate._paused_until == 3.0  # a plain 429 still pauses the whole process


def test_a_send_passes_at_once_only_while_nothing_would_hold_it() -> None:
    # What decides whether a first attempt is claimed as it is read (consumer/service.py):
    # a domain's pause, a 429 pause, a breaker not closed; each, once over, no longer.
    now = [0.0]
    gate = ProviderGate(
        4,
        BreakerPolicy(failure_threshold=1, cool_down_s=30.0),
        None,
        on_breaker_change=lambda _s: None,
        on_limit_change=lambda _l: None,
        clock=lambda: now[0],
    )
    assert gate.passes_at_once()
    scoped = classify(ProviderReply(429, retry_after_s=60.0, domain_scoped=True))
    gate.settle(gate_admission(gate), scoped, 0.01, "slow.example")
    assert not gate.passes_at_once()
    gate.settle(gate_admission(gate), OK, 0.01, "slow.example")  # its run of throttles ends
    assert gate.passes_at_once()
    gate.settle(gate_admission(gate), scoped, 0.01, "slow.example")
    now[0] = 61.0  # the pause ran out
    assert gate.passes_at_once()
    gate.settle(gate_admission(gate), classify(ProviderReply(429, retry_after_s=3.0)), 0.01, "x")
    assert not gate.passes_at_once()
    now[0] = 65.0
    assert gate.passes_at_once()
    gate.settle(gate_admission(gate), classify(ProviderReply(503)), 0.01, "x")
    assert gate.breaker.state is not BreakerState.CLOSED and not gate.passes_at_once()


def gate_admission(gate: ProviderGate) -> Admission:
    return asyncio.run(gate.admit_send())
