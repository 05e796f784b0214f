"""Every branch of the decisions, and their agreement with the transitions table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.core.backoff import RetryPolicy, retry_delay
from consumer.core.decide import (
    Decision,
    SendView,
    after_call,
    after_lookup,
    before_send,
    lease_expired,
    needs_lookup,
)
from consumer.core.outcome import Classification, Outcome, ProviderReply, TransportFailure, classify
from consumer.core.states import TERMINAL, Status, can_transition, claimable_from

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
        lambda attempts, expires_in, address: row(
            status=status,
            attempts=attempts,
            expires_at=None if expires_in is None else at(expires_in),
            to_address=address,
        ),
        st.integers(min_value=0, max_value=12),
        offsets,
        st.sampled_from(["ada@example.com", "bad", "a@b.co\r\nBcc: x@y.zz"]),
    )


def check(src: Status, decision: Decision, now: datetime = NOW) -> None:
    if decision.next_status is src:
        # The one stay: an unknown row whose look-up failed is rescheduled, not moved.
        assert src is S.UNKNOWN and decision.reason.startswith("look-up failed"), decision
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


def test_a_failure_after_earlier_attempts_is_confirmed_by_a_look_up() -> None:
    from consumer.core import Decision, SendView, Status, confirm_failure, needs_confirmation

    failed = Decision(Status.FAILED, reason="http 422", dead_letter=True, status_code=422)
    first_try = SendView(1, "k", "a@example.com", "t", "p1", Status.SENDING, attempts=1)
    retried = SendView(1, "k", "a@example.com", "t", "p1", Status.SENDING, attempts=3)
    assert not needs_confirmation(first_try, failed)
    assert needs_confirmation(retried, failed)
    assert not needs_confirmation(retried, Decision(Status.PENDING))
    assert confirm_failure(failed, None) == failed
    confirmed = confirm_failure(failed, "msg_1")
    assert (confirmed.next_status, confirmed.message_id, confirmed.dead_letter) == (
        Status.ACCEPTED,
        "msg_1",
        False,
    )
