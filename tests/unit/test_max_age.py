"""MAILBUS_MAX_AGE: no retry past created_at + max age; failed with dead letter max_age,
through the same look-up rules as expiry."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mailbus.consumer.core.backoff import RetryPolicy
from mailbus.consumer.core.decide import (
    MAX_AGE_REASON,
    SendView,
    after_call,
    after_lookup,
    before_send,
    confirm_final,
    needs_confirmation,
    too_old,
)
from mailbus.consumer.core.outcome import (
    ACCOUNT,
    Classification,
    Outcome,
    ProviderReply,
    TransportFailure,
    classify,
)
from mailbus.consumer.core.states import Status
from mailbus.consumer.ledger import dead_letter_reason
from mailbus.kernel.durations import parse_duration
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
DAY = 86400.0
POLICY = RetryPolicy(max_attempts=50, base_s=60.0, cap_s=3600.0, max_age_s=DAY)


def row(age_s: float, **changes: object) -> SendView:
    base = SendView(
        7,
        "k",
        "ada@example.com",
        "t",
        "p1",
        Status.SENDING,
        3,
        created_at=NOW - timedelta(seconds=age_s),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def half() -> float:
    return 0.5


def test_a_retry_that_would_fall_past_the_max_age_fails_with_max_age() -> None:
    decision = after_call(row(DAY - 10), classify(ProviderReply(503)), NOW, POLICY, half)
    assert decision.next_status is Status.FAILED
    assert decision.dead_letter
    assert decision.reason.startswith(MAX_AGE_REASON)
    assert dead_letter_reason(decision) == "max_age"


def test_a_retry_inside_the_max_age_is_scheduled() -> None:
    decision = after_call(row(3600), classify(ProviderReply(503)), NOW, POLICY, half)
    assert decision.next_status is Status.PENDING


def test_without_a_max_age_an_old_row_is_retried() -> None:
    no_max = replace(POLICY, max_age_s=None)
    decision = after_call(row(100 * DAY), classify(ProviderReply(503)), NOW, no_max, half)
    assert decision.next_status is Status.PENDING


def test_max_age_of_a_tried_row_needs_a_look_up_like_expiry() -> None:
    decision = after_call(row(DAY), classify(ProviderReply(503)), NOW, POLICY, half)
    assert needs_confirmation(decision, earlier_calls=2)
    found = confirm_final(row(DAY), decision, "msg-1", False, NOW, POLICY, half)
    assert found.next_status is Status.ACCEPTED and found.message_id == "msg-1"
    failed_lookup = confirm_final(row(DAY), decision, None, True, NOW, POLICY, half)
    assert failed_lookup.next_status is Status.UNKNOWN
    not_found = confirm_final(row(DAY), decision, None, False, NOW, POLICY, half)
    assert not_found == decision


def test_a_not_found_after_a_timeout_waits_out_the_late_accept_window() -> None:
    doubtful = row(DAY, status=Status.UNKNOWN, in_doubt_since=NOW - timedelta(seconds=5))
    decision = after_lookup(doubtful, None, False, NOW, POLICY, half)
    assert decision.next_status is Status.UNKNOWN  # the provider may still accept it
    later = NOW + timedelta(seconds=POLICY.late_accept_s)
    assert after_lookup(doubtful, None, False, later, POLICY, half).next_status is Status.FAILED


def test_an_unknown_outcome_stays_unknown_whatever_its_age() -> None:
    result = classify(TransportFailure(True, "read timeout"))
    assert after_call(row(2 * DAY), result, NOW, POLICY, half).next_status is Status.UNKNOWN


@pytest.mark.parametrize(
    ("attempts", "age_s", "fails"), [(1, DAY, True), (1, DAY - 1, False), (0, 2 * DAY, False)]
)
def test_before_send_stops_only_a_retry_past_the_max_age(
    attempts: int, age_s: float, fails: bool
) -> None:
    pending = row(age_s, status=Status.PENDING, attempts=attempts)
    decision = before_send(pending, NOW, False, POLICY.max_age_s)
    assert (decision is not None) is fails
    if decision is not None:
        assert dead_letter_reason(decision) == "max_age"


def test_expiry_wins_over_max_age() -> None:
    pending = row(2 * DAY, status=Status.PENDING, attempts=1, expires_at=NOW)
    decision = before_send(pending, NOW, False, DAY)
    assert decision is not None and decision.next_status is Status.EXPIRED


def test_too_old_without_created_at_is_never_too_old() -> None:
    assert not too_old(row(0, created_at=None), NOW, 1.0)


def test_max_age_setting_parses_a_duration() -> None:
    assert load_settings({"MAILBUS_MAX_AGE": "24h"}).max_age == DAY
    assert load_settings({}).max_age is None
    assert parse_duration("90m", "X") == 5400.0


@pytest.mark.parametrize("text", ["24", "0h", "1.5h", "h", "5m,1h", "-1h"])
def test_a_bad_max_age_names_the_setting(text: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_MAX_AGE": text})
    assert "MAILBUS_MAX_AGE" in str(error.value)


def test_an_account_refusal_whose_next_try_falls_past_the_max_age_fails_with_max_age() -> None:
    """A revoked key, a suspended account or a quota spends no attempt (uncounted), but it
    is a retry all the same: MAILBUS_MAX_AGE ends it (docs/providers.md)."""
    refused = Classification(Outcome.RETRY, status_code=401, server_stage=ACCOUNT)
    decision = after_call(row(DAY - 10, attempts=1), refused, NOW, POLICY, half)
    assert (decision.next_status, dead_letter_reason(decision)) == (Status.FAILED, "max_age")
    assert decision.uncounted  # the refused call still spends no attempt
    fresh = after_call(row(60, attempts=1), refused, NOW, POLICY, half)
    assert (fresh.next_status, fresh.uncounted) == (Status.PENDING, True)


def test_a_mail_whose_only_calls_were_refused_is_not_sent_past_the_max_age() -> None:
    """Its refused calls were handed back (attempts 0), but its first claim was made: a mail
    held for days by a revoked key is not sent stale once the key works again."""
    held = row(2 * DAY, status=Status.PENDING, attempts=0, first_tried_at=NOW - timedelta(days=2))
    decision = before_send(held, NOW, False, POLICY.max_age_s)
    assert decision is not None and dead_letter_reason(decision) == "max_age"
    never_claimed = replace(held, first_tried_at=None)
    assert before_send(never_claimed, NOW, False, POLICY.max_age_s) is None
