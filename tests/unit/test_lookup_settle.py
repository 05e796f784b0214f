"""Look-ups that can be trusted and windows that hold (issue 34, review 2026-12-06 #1-#5,
#19b): pure decisions with injected time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core import RetryPolicy, SendView, Status
from mailbus.consumer.core.capability import (
    DEFAULT_LOOKUP_SETTLE_S,
    Capability,
    key_conflict,
    lookup_settle_s,
    without_cover,
)
from mailbus.consumer.core.decide import Decision, after_lookup, confirm_final, key_in_use
from mailbus.consumer.core.outcome import Outcome, ProviderReply, classify
from mailbus.consumer.provider import MailbusDialect
from mailbus.consumer.runner import window_margin_seconds
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.resend.sending import ResendDialect

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=5, base_s=2.0, cap_s=300.0, late_accept_s=30.0)
POSTMARK = PostmarkDialect("shop@example.com").capability
RESEND = ResendDialect("shop@example.com").capability


def half() -> float:
    return 0.5


def unknown(attempts: int = 1, **changes: object) -> SendView:
    view = SendView(7, "order-1", "ana@example.com", "welcome", "p1", Status.UNKNOWN, attempts)
    fields: dict[str, object] = {"in_doubt_since": T0, "first_tried_at": T0, **changes}
    return replace(view, **fields)  # type: ignore[arg-type]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_the_settle_time_is_the_providers_the_settings_or_a_conservative_default() -> None:
    assert lookup_settle_s(POSTMARK) == DEFAULT_LOOKUP_SETTLE_S >= 120  # Postmark documents none
    assert lookup_settle_s(POSTMARK, 10.0) == 10.0  # MAILBUS_LOOKUP_SETTLE
    assert lookup_settle_s(MailbusDialect.capability) == 0.0  # its key covers a resend
    assert lookup_settle_s(Capability(look_up=True, settle_s=42.0)) == 42.0
    assert lookup_settle_s(RESEND, 10.0) == 0.0  # nothing to look up
    with pytest.raises(ValueError):
        Capability(look_up=True, settle_s=-1.0)


def test_not_found_before_the_settle_time_is_unknown_looked_up_again_never_resent() -> None:
    """Review #1: the look-up right after a timeout finds nothing; that is no verdict."""
    early = after_lookup(unknown(), None, False, at(2), POLICY, half, settle_s=300.0)
    assert early.next_status is Status.UNKNOWN and not early.dead_letter
    assert early.reason.startswith("not found yet")
    assert at(2) < early.retry_at <= at(300)  # looked up again, at the latest when it settles
    later = after_lookup(unknown(), None, False, at(200), POLICY, half, settle_s=300.0)
    assert later.next_status is Status.UNKNOWN and later.retry_at == at(300)
    settled = after_lookup(unknown(), None, False, at(300), POLICY, half, settle_s=300.0)
    assert settled.next_status is Status.PENDING  # believed: sent again
    found = after_lookup(unknown(), "m-1", False, at(2), POLICY, half, settle_s=300.0)
    assert (found.next_status, found.message_id) == (Status.ACCEPTED, "m-1")


def test_a_row_never_in_doubt_needs_no_settling() -> None:
    view = unknown(in_doubt_since=None)
    assert after_lookup(view, None, False, at(1), POLICY, half, settle_s=300.0).next_status is (
        Status.PENDING
    )


def test_a_final_verdict_waits_for_the_settle_time_too() -> None:
    final = Decision(Status.FAILED, reason="http 422", dead_letter=True)
    waits = confirm_final(unknown(3), final, None, False, at(60), POLICY, half, settle_s=300.0)
    assert waits.next_status is Status.UNKNOWN and waits.retry_at == at(300)
    stands = confirm_final(unknown(3), final, None, False, at(300), POLICY, half, settle_s=300.0)
    assert stands == final


@given(
    settle_ms=st.integers(0, 3_600_000),
    elapsed_ms=st.integers(0, 7_200_000),
    attempts=st.integers(1, 5),
)
def test_no_resend_is_ever_decided_before_the_settle_time(
    settle_ms: int, elapsed_ms: int, attempts: int
) -> None:
    settle, elapsed = settle_ms / 1000, elapsed_ms / 1000
    got = after_lookup(unknown(attempts), None, False, at(elapsed), POLICY, half, settle_s=settle)
    if got.next_status is not Status.UNKNOWN:
        assert elapsed >= settle
    if elapsed < settle:
        latest = at(max(settle, POLICY.late_accept_s))  # a final state waits out both
        assert got.retry_at is not None and at(elapsed) <= got.retry_at <= latest


@pytest.mark.parametrize("status", [500, 502, 504])
def test_a_5xx_at_postmark_is_in_doubt_and_looked_up(status: int) -> None:
    """Review #2: Postmark has a look-up but no key; a 500 may follow acceptance."""
    reply = classify(ProviderReply(status, error_excerpt="ErrorCode 0: oops"))
    assert without_cover(POSTMARK, reply).outcome is Outcome.UNKNOWN
    assert without_cover(POSTMARK, classify(ProviderReply(503))).outcome is Outcome.RETRY


def test_a_5xx_or_409_in_progress_under_an_expiring_key_is_held_to_its_window() -> None:
    """Review #4: a retry after a 5xx (or Resend's 409 concurrent_idempotent_requests)
    under a 24 h key is in doubt, so the key's window applies to every later send."""
    concurrent = classify(ProviderReply(409, transient=True, error_excerpt="concurrent"))
    assert concurrent.outcome is Outcome.RETRY
    assert without_cover(RESEND, concurrent).outcome is Outcome.UNKNOWN
    assert without_cover(RESEND, classify(ProviderReply(500))).outcome is Outcome.UNKNOWN
    for refused in (429, 503):
        assert without_cover(RESEND, classify(ProviderReply(refused))).outcome is Outcome.RETRY
    forever = MailbusDialect.capability
    assert without_cover(forever, classify(ProviderReply(500))).outcome is Outcome.RETRY


def test_a_409_rejection_under_a_key_says_the_key_was_used() -> None:
    used = classify(ProviderReply(409, error_excerpt="invalid_idempotent_request"))
    assert key_conflict(RESEND, used)
    assert not key_conflict(POSTMARK, used)  # no key: a 409 is about the mail
    assert not key_conflict(RESEND, classify(ProviderReply(422)))


def test_a_key_in_use_waits_for_an_operator_until_its_window_is_over() -> None:
    """Review #19b: no further attempts while the key's window lasts; after it the window
    itself forbids a resend."""
    window_ends = at(86_400)
    got = key_in_use(unknown(2), window_ends, at(10), POLICY)
    assert got.next_status is Status.UNKNOWN and got.retry_at == window_ends
    assert "operator" in got.reason and not got.dead_letter
    assert key_in_use(unknown(2), None, at(10), POLICY).retry_at == at(310)


def test_the_settings_and_the_margin_that_covers_a_resends_way_to_the_provider() -> None:
    """MAILBUS_LOOKUP_SETTLE (0 allowed) and MAILBUS_KEY_WINDOW_MARGIN (default 5 min),
    which never drops below the slot wait, connect and request timeouts together."""
    defaults = load_settings({})
    assert (defaults.lookup_settle, defaults.key_window_margin) == (None, 300.0)
    assert window_margin_seconds(defaults) == 300.0  # not the connect timeout (review #5)
    told = load_settings({"MAILBUS_LOOKUP_SETTLE": "0", "MAILBUS_KEY_WINDOW_MARGIN": "1"})
    assert (told.lookup_settle, told.key_window_margin) == (0.0, 1.0)
    assert window_margin_seconds(told) == 15 / 2 + 2 + 15  # slot wait, connect, request
    for bad in ("-1", "soon"):
        with pytest.raises(ConfigError, match="MAILBUS_LOOKUP_SETTLE"):
            load_settings({"MAILBUS_LOOKUP_SETTLE": bad})
