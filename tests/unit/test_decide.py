"""Every branch of the decisions, and their agreement with the transitions table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.backoff import RetryPolicy, retry_delay
from mailbus.consumer.core.decide import (
    Decision,
    SendView,
    after_call,
    after_lookup,
    before_send,
    confirm_final,
    lease_expired,
    needs_confirmation,
    needs_lookup,
    unsendable,
    wait_for_provider,
)
from mailbus.consumer.core.outcome import (
    Classification,
    Outcome,
    ProviderReply,
    TransportFailure,
    classify,
)
from mailbus.consumer.core.states import TERMINAL, Status, can_transition, claimable_from

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=5, base_s=2.0, cap_s=300.0)
S = Status


def rand_half() -> float:
    return 0.5


def row(**changes: object) -> SendView:
    base = SendView(
        id=7,
        dedupe_key="order-1042-shipped",
        to_address="ada@example.com",
        template="order_shipped",
        priority="p1",
        status=S.PENDING,
        attempts=0,
        expires_at=None,
        next_try_at=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


# --- before_send ---------------------------------------------------------------------------


def test_before_send_lets_a_good_row_through() -> None:
    assert before_send(row(), NOW, suppressed=False) is None
    assert before_send(row(expires_at=at(1)), NOW, suppressed=False) is None


@pytest.mark.parametrize("expires_in", [0, -1, -86400])
def test_before_send_expires_a_stale_row(expires_in: float) -> None:
    got = before_send(row(expires_at=at(expires_in)), NOW, suppressed=False)
    assert got == Decision(S.EXPIRED, reason="expired before sending")


def test_before_send_suppresses() -> None:
    got = before_send(row(), NOW, suppressed=True)
    assert got == Decision(S.SUPPRESSED, reason="address is suppressed")


def test_expiry_wins_over_suppression() -> None:
    got = before_send(row(expires_at=at(-1)), NOW, suppressed=True)
    assert got is not None and got.next_status is S.EXPIRED


@pytest.mark.parametrize(
    "address",
    [
        "",
        "not-an-address",
        "ada@localhost",
        "ada@example.com\r\nBcc: all@example.com",
        "ada@example.com\n",
        "ada@exa\x00mple.com",
        "Ada <ada@example.com>",
        "a@b.com, c@d.com",
        "x" * 65 + "@example.com",
    ],
)
def test_before_send_fails_a_bad_address_to_the_dlq(address: str) -> None:
    got = before_send(row(to_address=address), NOW, suppressed=False)
    assert got is not None
    assert got.next_status is S.FAILED
    assert got.dead_letter
    assert got.reason.startswith("invalid to_address")
    assert "\n" not in got.reason and "\r" not in got.reason


@pytest.mark.parametrize("status", [s for s in Status if s is not S.PENDING])
def test_before_send_refuses_a_row_that_is_not_pending(status: Status) -> None:
    with pytest.raises(ValueError, match="pending"):
        before_send(row(status=status), NOW, suppressed=True)


# --- after_call ----------------------------------------------------------------------------


def sending(attempts: int, **changes: object) -> SendView:
    return row(status=S.SENDING, attempts=attempts, **changes)


def test_after_call_accepted() -> None:
    got = after_call(
        sending(1), classify(ProviderReply(202, "m-1", None, "")), NOW, POLICY, rand_half
    )
    assert got == Decision(S.ACCEPTED, reason="http 202", message_id="m-1", status_code=202)


def test_after_call_rejected_goes_to_the_dlq() -> None:
    result = classify(ProviderReply(422, None, None, "bad template"))
    got = after_call(sending(1), result, NOW, POLICY, rand_half)
    assert got == Decision(
        S.FAILED, reason="http 422: bad template", dead_letter=True, status_code=422
    )


@pytest.mark.parametrize("attempts", [1, 2, 4])
def test_after_call_retry_schedules_a_later_try(attempts: int) -> None:
    got = after_call(
        sending(attempts), classify(ProviderReply(503, None, None, "")), NOW, POLICY, rand_half
    )
    delay = retry_delay(attempts, POLICY, rand_half, None)
    assert got == Decision(S.PENDING, retry_at=at(delay), reason="http 503", status_code=503)
    assert got.retry_at is not None and got.retry_at > NOW


def test_after_call_retry_honours_retry_after() -> None:
    result = classify(ProviderReply(429, None, 120.0, ""))
    got = after_call(sending(1), result, NOW, POLICY, rand_half)
    assert got.next_status is S.PENDING
    assert got.retry_at == at(120)


def test_after_call_retry_when_not_sent() -> None:
    result = classify(TransportFailure(False, "connection refused"))
    got = after_call(sending(1), result, NOW, POLICY, rand_half)
    assert got.next_status is S.PENDING and got.status_code is None


@pytest.mark.parametrize("attempts", [5, 6, 100])
def test_after_call_gives_up_after_max_attempts(attempts: int) -> None:
    result = classify(ProviderReply(503, None, None, ""))
    got = after_call(sending(attempts), result, NOW, POLICY, rand_half)
    assert got == Decision(
        S.FAILED,
        reason=f"gave up after {attempts} attempts: http 503",
        dead_letter=True,
        status_code=503,
    )


def test_after_call_expires_when_the_next_try_is_too_late() -> None:
    result = classify(ProviderReply(429, None, 60.0, ""))
    got = after_call(sending(1, expires_at=at(60)), result, NOW, POLICY, rand_half)
    assert got.next_status is S.EXPIRED
    assert got.retry_at is None and not got.dead_letter
    assert got.reason == "expires before the next try: http 429"


def test_after_call_retries_when_the_next_try_is_in_time() -> None:
    result = classify(ProviderReply(429, None, 60.0, ""))
    got = after_call(sending(1, expires_at=at(60.001)), result, NOW, POLICY, rand_half)
    assert got.next_status is S.PENDING and got.retry_at == at(60)


@pytest.mark.parametrize(
    "result",
    [
        ProviderReply(200, None, None, ""),
        ProviderReply(303, None, None, ""),
        TransportFailure(True, "read timeout"),
    ],
)
def test_after_call_unknown_stays_unknown_with_a_retry_at(
    result: ProviderReply | TransportFailure,
) -> None:
    # Even with attempts spent or the mail expired: only a look-up may settle it.
    for view in (sending(1), sending(99), sending(1, expires_at=at(-1))):
        got = after_call(view, classify(result), NOW, POLICY, rand_half)
        assert got.next_status is S.UNKNOWN
        assert got.retry_at == at(retry_delay(view.attempts, POLICY, rand_half, None))
        assert not got.dead_letter and got.message_id is None


# --- after_lookup --------------------------------------------------------------------------


def unknown(attempts: int, **changes: object) -> SendView:
    return row(status=S.UNKNOWN, attempts=attempts, **changes)


def test_after_lookup_found_is_accepted() -> None:
    got = after_lookup(unknown(3), "m-9", False, NOW, POLICY, rand_half)
    assert got == Decision(S.ACCEPTED, reason="accepted per look-up", message_id="m-9")


def test_found_wins_even_when_spent_or_expired() -> None:
    view = unknown(99, expires_at=at(-10))
    assert after_lookup(view, "m-9", False, NOW, POLICY, rand_half).next_status is S.ACCEPTED


def test_after_lookup_not_found_retries_with_the_same_key() -> None:
    got = after_lookup(unknown(2), None, False, NOW, POLICY, rand_half)
    assert got == Decision(
        S.PENDING,
        retry_at=at(retry_delay(2, POLICY, rand_half, None)),
        reason="not accepted per look-up",
    )


def test_after_lookup_not_found_and_spent_goes_to_the_dlq() -> None:
    got = after_lookup(unknown(5), None, False, NOW, POLICY, rand_half)
    assert got.next_status is S.FAILED and got.dead_letter
    assert got.reason == "gave up after 5 attempts: not accepted per look-up"


@pytest.mark.parametrize("expires_in", [-1, 0, 1])
def test_after_lookup_not_found_and_expired(expires_in: float) -> None:
    got = after_lookup(unknown(1, expires_at=at(expires_in)), None, False, NOW, POLICY, rand_half)
    assert got.next_status is S.EXPIRED and not got.dead_letter


def test_after_lookup_failed_stays_unknown() -> None:
    got = after_lookup(unknown(2), None, True, NOW, POLICY, rand_half, detail="http 502")
    assert got == Decision(
        S.UNKNOWN,
        retry_at=at(retry_delay(2, POLICY, rand_half, None)),
        reason="look-up failed, outcome unknown: http 502",
    )


def test_after_lookup_failed_never_gives_up_or_expires() -> None:
    view = unknown(99, expires_at=at(-10))
    assert after_lookup(view, None, True, NOW, POLICY, rand_half).next_status is S.UNKNOWN


def test_after_lookup_with_no_recorded_call_still_waits() -> None:
    got = after_lookup(row(status=S.SENDING, attempts=0), None, True, NOW, POLICY, rand_half)
    assert got.retry_at is not None and got.retry_at >= at(1)


# --- leases --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "lease_until", "expired", "lookup"),
    [
        (S.SENDING, at(-1), True, True),
        (S.SENDING, NOW, True, True),
        (S.SENDING, None, True, True),
        (S.SENDING, at(1), False, False),
        (S.UNKNOWN, at(1), False, True),
        (S.UNKNOWN, None, False, True),
        (S.PENDING, at(-1), False, False),
        (S.ACCEPTED, at(-1), False, False),
    ],
)
def test_leases(status: Status, lease_until: datetime | None, expired: bool, lookup: bool) -> None:
    assert lease_expired(status, lease_until, NOW) is expired
    assert needs_lookup(status, lease_until, NOW) is lookup


def test_a_lease_expired_row_may_become_unknown() -> None:
    assert can_transition(S.SENDING, S.UNKNOWN)


# --- agreement with the transitions table --------------------------------------------------

codes = st.integers(min_value=0, max_value=700)
replies = st.builds(
    ProviderReply,
    codes,
    st.none() | st.text(max_size=5),
    st.none() | st.floats(min_value=-10, max_value=1e6, allow_nan=False),
    st.text(max_size=20),
)
failures = st.builds(TransportFailure, st.booleans(), st.text(max_size=20))
offsets = st.none() | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
unit = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


def rand_of(value: float) -> Callable[[], float]:
    return lambda: value


def views(status: Status) -> st.SearchStrategy[SendView]:
    return st.builds(
        lambda attempts, expires_in, address, doubt_in: row(
            status=status,
            attempts=attempts,
            expires_at=None if expires_in is None else at(expires_in),
            to_address=address,
            in_doubt_since=None if doubt_in is None else at(doubt_in),
        ),
        st.integers(min_value=0, max_value=12),
        offsets,
        st.sampled_from(["ada@example.com", "bad", "a@b.co\r\nBcc: x@y.zz"]),
        offsets,
    )


def check(src: Status, decision: Decision, now: datetime = NOW) -> None:
    if decision.next_status is src:
        # The one stay: an unknown row whose look-up failed, or whose final state waits out
        # the late-acceptance window, is rescheduled, not moved.
        assert src is S.UNKNOWN, decision
        assert decision.reason.startswith(("look-up failed", "look-up again before")), decision
    else:
        assert can_transition(src, decision.next_status), (src, decision)
    if decision.next_status in {S.PENDING, S.UNKNOWN}:
        assert decision.retry_at is not None and decision.retry_at > now
    else:
        assert decision.retry_at is None
    assert decision.dead_letter is (decision.next_status is S.FAILED)
    assert (decision.message_id is not None) is (decision.next_status is S.ACCEPTED)
    assert "\n" not in decision.reason and decision.reason


@given(views(S.PENDING), st.booleans())
def test_before_send_decisions_are_allowed_from_pending(view: SendView, suppressed: bool) -> None:
    decision = before_send(view, NOW, suppressed)
    if decision is None:
        assert can_transition(S.PENDING, S.SENDING)
    else:
        check(S.PENDING, decision)
        assert decision.next_status in TERMINAL


@given(views(S.SENDING), replies | failures, unit)
def test_after_call_decisions_are_allowed_from_sending(
    view: SendView, result: ProviderReply | TransportFailure, r: float
) -> None:
    check(S.SENDING, after_call(view, classify(result), NOW, POLICY, rand_of(r)))


@pytest.mark.parametrize("src", [S.UNKNOWN, S.SENDING])
@given(st.data())
def test_after_lookup_decisions_are_allowed(src: Status, data: st.DataObject) -> None:
    # From an unknown row, or a sending row whose lease expired (needs_lookup).
    view = data.draw(views(src))
    found = data.draw(st.none() | st.sampled_from(["m-1", ""]))
    failed = data.draw(st.booleans())
    decision = after_lookup(view, found, failed, NOW, POLICY, rand_of(data.draw(unit)))
    check(src, decision)


def test_every_claimable_status_has_a_decision_path() -> None:
    # pending goes through before_send, unknown through after_lookup: nothing is left over.
    assert set(claimable_from()) == {S.PENDING, S.UNKNOWN}
    assert not needs_lookup(S.PENDING, None, NOW)
    assert needs_lookup(S.UNKNOWN, None, NOW)


def test_unknown_classification_is_never_terminal() -> None:
    result = Classification(Outcome.UNKNOWN, reason="x")
    assert after_call(sending(100), result, NOW, POLICY, rand_half).next_status not in TERMINAL


def test_a_final_state_needs_a_look_up_only_after_earlier_calls() -> None:
    failed = Decision(S.FAILED, reason="http 422", dead_letter=True, status_code=422)
    for final in (failed, Decision(S.EXPIRED, reason="x"), Decision(S.SUPPRESSED, reason="x")):
        assert not needs_confirmation(final, earlier_calls=0)
        assert needs_confirmation(final, earlier_calls=1)
    assert not needs_confirmation(Decision(S.PENDING), earlier_calls=3)
    assert not needs_confirmation(Decision(S.ACCEPTED, message_id="m"), earlier_calls=3)


FAILED_422 = Decision(S.FAILED, reason="http 422", dead_letter=True, status_code=422)


def test_confirm_final_found_is_accepted() -> None:
    got = confirm_final(sending(3), FAILED_422, "msg_1", False, NOW, POLICY, rand_half)
    assert (got.next_status, got.message_id, got.dead_letter) == (S.ACCEPTED, "msg_1", False)


def test_confirm_final_with_a_failed_look_up_stays_unknown() -> None:
    # Before: a failed confirming look-up left the failure standing.
    got = confirm_final(sending(3), FAILED_422, None, True, NOW, POLICY, rand_half, detail="503")
    assert got.next_status is S.UNKNOWN and not got.dead_letter
    assert got.reason == "look-up failed, outcome unknown: 503"


def test_confirm_final_not_found_stands_when_no_call_is_in_doubt() -> None:
    assert confirm_final(sending(3), FAILED_422, None, False, NOW, POLICY, rand_half) == FAILED_422


@pytest.mark.parametrize(
    "final", [FAILED_422, Decision(S.EXPIRED, reason="expired before sending")]
)
def test_a_not_found_inside_the_late_accept_window_waits_as_unknown(final: Decision) -> None:
    # A call timed out 10 s ago; the provider may still be working on it for 20 s more.
    policy = replace(POLICY, late_accept_s=30.0)
    view = sending(3, in_doubt_since=at(-10))
    got = confirm_final(view, final, None, False, NOW, policy, rand_half)
    assert got.next_status is S.UNKNOWN and got.retry_at == at(20)
    assert got.reason.startswith(f"look-up again before {final.next_status.value}")
    later = confirm_final(view, final, None, False, at(20), policy, rand_half)
    assert later == final


def test_after_lookup_final_waits_out_the_window_but_a_retry_does_not() -> None:
    policy = replace(POLICY, late_accept_s=30.0)
    spent = unknown(5, in_doubt_since=at(-1))
    assert after_lookup(spent, None, False, NOW, policy, rand_half).next_status is S.UNKNOWN
    expiring = unknown(1, in_doubt_since=at(-1), expires_at=at(0.5))
    assert after_lookup(expiring, None, False, NOW, policy, rand_half).next_status is S.UNKNOWN
    retry = after_lookup(unknown(2, in_doubt_since=at(-1)), None, False, NOW, policy, rand_half)
    assert retry.next_status is S.PENDING  # the same Idempotency-Key again is safe


def test_a_mail_that_cannot_be_encoded_fails_naming_the_field() -> None:
    got = unsendable("dedupe_key", "must be printable ASCII")
    assert got == Decision(
        S.FAILED, reason="invalid dedupe_key: must be printable ASCII", dead_letter=True
    )


def test_a_row_whose_provider_is_not_here_stays_pending_visibly() -> None:
    got = wait_for_provider(row(attempts=2), "fallback", NOW, POLICY)
    assert got.next_status is S.PENDING and got.retry_at == at(POLICY.cap_s)
    assert "fallback" in got.reason
