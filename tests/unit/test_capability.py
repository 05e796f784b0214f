"""The capability model: what a provider offers decides what an unknown outcome means."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core import RetryPolicy, SendView, Status
from mailbus.consumer.core.capability import (
    Capability,
    Guarantee,
    IdempotencyKey,
    Resolution,
    guarantee_of,
    may_resend,
    resend_window_s,
    resolve_unknown,
)
from mailbus.consumer.core.decide import doubt_without_lookup, resend_closed

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KEY_2S = Capability(IdempotencyKey("Idempotency-Key", 2.0))
FOREVER = Capability(IdempotencyKey("Idempotency-Key", None))
LOOK_UP = Capability(look_up=True)
NEITHER = Capability()
POLICY = RetryPolicy(max_attempts=5, base_s=0.1, cap_s=1.0, late_accept_s=0.5)

capabilities = st.builds(
    Capability,
    key=st.none()
    | st.builds(
        IdempotencyKey,
        st.just("Idempotency-Key"),
        st.none() | st.floats(0.1, 86_400.0),
    ),
    look_up=st.booleans(),
)


@pytest.mark.parametrize(
    ("capability", "at_least_once", "guarantee"),
    [
        (KEY_2S, False, Guarantee.EXACTLY_ONCE),
        (LOOK_UP, True, Guarantee.EXACTLY_ONCE),
        (NEITHER, False, Guarantee.AT_MOST_ONCE),
        (NEITHER, True, Guarantee.AT_LEAST_ONCE),
    ],
)
def test_the_guarantee_follows_from_what_the_provider_offers(
    capability: Capability, at_least_once: bool, guarantee: Guarantee
) -> None:
    assert guarantee_of(capability, at_least_once) is guarantee


def test_a_key_resends_only_inside_its_window_from_the_first_call() -> None:
    reach = 0.5  # the resend must arrive before the window ends
    inside = T0 + timedelta(seconds=1.4)
    past = T0 + timedelta(seconds=1.5)
    assert resolve_unknown(KEY_2S, T0, inside, False, reach) is Resolution.RESEND
    assert resolve_unknown(KEY_2S, T0, past, False, reach) is Resolution.WAIT
    assert resolve_unknown(KEY_2S, None, inside, False, reach) is Resolution.WAIT  # unknown start
    assert resolve_unknown(FOREVER, T0, T0 + timedelta(days=9), False, reach) is Resolution.RESEND


def test_a_look_up_wins_and_neither_waits_unless_at_least_once() -> None:
    both = Capability(IdempotencyKey("Idempotency-Key", 2.0), look_up=True)
    late = T0 + timedelta(hours=1)
    assert resolve_unknown(both, T0, late, False, 0.0) is Resolution.LOOK_UP
    assert resolve_unknown(LOOK_UP, T0, late, False, 0.0) is Resolution.LOOK_UP
    assert resolve_unknown(NEITHER, T0, T0, False, 0.0) is Resolution.WAIT
    assert resolve_unknown(NEITHER, T0, late, True, 0.0) is Resolution.RESEND


@given(
    capabilities,
    st.booleans(),
    st.floats(0.0, 200_000.0),
    st.floats(0.0, 10.0),
)
def test_no_resend_of_a_mail_in_doubt_that_no_key_or_look_up_covers(
    capability: Capability, at_least_once: bool, elapsed_s: float, reach_s: float
) -> None:
    """The property behind exactly once: a mail in doubt goes out again only if a look-up
    said it was not accepted, or its key still deduplicates it when the resend arrives, or
    the operator asked for at least once (and the provider has nothing better)."""
    now = T0 + timedelta(seconds=elapsed_s)
    allowed = may_resend(capability, True, T0, now, at_least_once, reach_s)
    key = capability.key
    covered = (
        capability.look_up
        or (key is not None and (key.window_s is None or elapsed_s + reach_s < key.window_s))
        or (key is None and at_least_once)
    )
    assert allowed == covered
    assert may_resend(capability, False, None, now, at_least_once, reach_s)  # never tried
    window = resend_window_s(capability, at_least_once, reach_s)
    if window is not None:  # what the claim checks on the database's clock agrees
        assert allowed == (elapsed_s < window)


def _row(attempts: int) -> SendView:
    return SendView(
        1,
        "k",
        "a@b.example",
        "t",
        "p1",
        Status.SENDING,
        attempts,
        in_doubt_since=T0,
        first_tried_at=T0,
    )


def test_doubt_without_a_look_up_resends_waits_or_never_concludes_under_a_key() -> None:
    now = T0 + timedelta(seconds=1)
    again = doubt_without_lookup(_row(1), True, True, now, POLICY, lambda: 0.5)
    assert again.next_status is Status.PENDING
    waits = doubt_without_lookup(_row(1), False, True, now, POLICY, lambda: 0.5)
    assert waits.next_status is Status.UNKNOWN
    assert "waits for an operator" in waits.reason
    spent = doubt_without_lookup(_row(5), True, True, now, POLICY, lambda: 0.5)
    assert spent.next_status is Status.UNKNOWN  # out of attempts, yet maybe accepted
    blind = doubt_without_lookup(
        _row(5), True, False, T0 + timedelta(seconds=9), POLICY, lambda: 0.5
    )
    assert blind.next_status is Status.FAILED  # at least once: no answer counts as "no"


def test_a_closed_window_leaves_the_row_unknown_for_an_operator() -> None:
    decision = resend_closed(T0, POLICY)
    assert decision.next_status is Status.UNKNOWN
    assert decision.retry_at == T0 + timedelta(seconds=POLICY.cap_s)
