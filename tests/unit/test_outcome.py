"""classify() against docs/reference/contract.md#email-api, and Retry-After parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.outcome import (
    MAX_REASON_CHARS,
    MAX_RETRY_AFTER_S,
    Classification,
    Outcome,
    ProviderReply,
    TransportFailure,
    classify,
    clip_reason,
    parse_retry_after,
)

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
A, R, X, U = Outcome.ACCEPTED, Outcome.RETRY, Outcome.REJECTED, Outcome.UNKNOWN


@pytest.mark.parametrize(
    ("code", "message_id", "expected"),
    [
        # 2xx with an id: accepted
        (200, "msg-1", A),
        (201, "msg-1", A),
        (202, "msg-1", A),
        (299, "msg-1", A),
        # 2xx whose body was not {"id": "<non-empty str>"}: unknown
        (200, None, U),
        (200, "", U),
        (204, None, U),
        # retryable per the contract
        (408, None, R),
        (429, None, R),
        (500, None, R),
        (502, None, R),
        (503, None, R),
        (504, None, R),
        # any other 4xx: rejected
        (400, None, X),
        (401, None, X),
        (403, None, X),
        (404, None, X),
        (409, None, X),
        (413, None, X),
        (422, None, X),
        (499, None, X),
        # other 5xx: retry (a server error, not a verdict; same key makes it safe)
        (501, None, R),
        (505, None, R),
        (507, None, R),
        (599, None, R),
        # 1xx, 3xx, nonsense: unknown (resolved by look-up)
        (100, None, U),
        (103, None, U),
        (301, None, U),
        (303, None, U),
        (307, None, U),
        (0, None, U),
        (600, None, U),
        (999, None, U),
        # an id on a non-2xx reply is never an acceptance
        (503, "msg-1", R),
        (422, "msg-1", X),
    ],
)
def test_classify_reply(code: int, message_id: str | None, expected: Outcome) -> None:
    got = classify(ProviderReply(code, message_id, None, ""))
    assert got.outcome is expected
    assert got.status_code == code
    assert got.message_id == (message_id if expected is A else None)
    assert got.reason.startswith(f"http {code}")


@pytest.mark.parametrize(
    ("failure", "expected", "reason"),
    [
        (TransportFailure(False, "connection refused"), R, "not sent: connection refused"),
        (TransportFailure(False, "connect timeout"), R, "not sent: connect timeout"),
        (TransportFailure(True, "read timeout"), U, "lost after send: read timeout"),
        (TransportFailure(True, "server disconnected"), U, "lost after send: server discon"),
        (TransportFailure(True, ""), U, "transport error, lost after send"),
    ],
)
def test_classify_transport_failure(
    failure: TransportFailure, expected: Outcome, reason: str
) -> None:
    got = classify(failure)
    assert got.outcome is expected
    assert got.status_code is None
    assert got.message_id is None
    assert reason in got.reason


def test_accepted_carries_the_message_id() -> None:
    got = classify(ProviderReply(200, "abc-123", None, ""))
    assert got == Classification(A, "abc-123", None, "http 200", 200)


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 504, 501])
def test_retry_carries_retry_after(code: int) -> None:
    assert classify(ProviderReply(code, None, 7.5, "")).retry_after_s == 7.5


@pytest.mark.parametrize("seconds", [-1.0, float("nan")])
def test_retry_drops_a_nonsense_retry_after(seconds: float) -> None:
    assert classify(ProviderReply(429, None, seconds, "")).retry_after_s is None


def test_retry_clamps_a_huge_retry_after() -> None:
    got = classify(ProviderReply(429, None, 1e9, ""))
    assert got.retry_after_s == MAX_RETRY_AFTER_S


@pytest.mark.parametrize("code", [200, 422, 301])
def test_only_retry_carries_retry_after(code: int) -> None:
    assert classify(ProviderReply(code, "m", 30.0, "")).retry_after_s is None


def test_rejected_reason_has_the_excerpt_on_one_line() -> None:
    got = classify(ProviderReply(422, None, None, 'invalid "to"\r\nX-Injected: 1'))
    assert got.reason == 'http 422: invalid "to" X-Injected: 1'


def test_reason_masks_bearer_tokens_and_is_short() -> None:
    got = classify(TransportFailure(True, "Authorization: Bearer sk_live_SECRET " + "x" * 500))
    assert "SECRET" not in got.reason
    assert len(got.reason) <= MAX_REASON_CHARS


@given(st.text())
def test_clip_reason_is_one_short_line(text: str) -> None:
    line = clip_reason(text)
    assert len(line) <= MAX_REASON_CHARS
    assert not any(ch in line for ch in "\r\n\x00")


# --- Retry-After -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("120", 120.0),
        (" 5 ", 5.0),
        ("1.5", 1.5),
        ("3600", 3600.0),
        ("86400", MAX_RETRY_AFTER_S),
        ("9" * 400, MAX_RETRY_AFTER_S),
        ("Sat, 01 Mar 2025 12:00:30 GMT", 30.0),
        ("Sat, 01 Mar 2025 13:00:00 GMT", 3600.0),
        ("Sat, 01 Mar 2025 13:00:01 GMT", MAX_RETRY_AFTER_S),
        ("Saturday, 01-Mar-25 12:01:00 GMT", 60.0),  # RFC 850, obsolete but allowed
        ("Sat Mar  1 12:00:10 2025", 10.0),  # asctime, taken as UTC
        ("Sat, 01 Mar 2025 14:00:30 +0200", 30.0),
        ("Sat, 01 Mar 2025 11:59:00 GMT", 0.0),  # in the past: no wait
        (None, None),
        ("", None),
        ("   ", None),
        ("-5", None),
        ("+5", None),
        ("5s", None),
        ("1e3", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("Sat, 99 Foo 2025 99:99:99 GMT", None),
        ("٣", None),  # a non-ASCII digit
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_parse_retry_after_uses_the_injected_now() -> None:
    header = "Sat, 01 Mar 2025 12:00:30 GMT"
    assert parse_retry_after(header, NOW - timedelta(seconds=70)) == 100.0
    assert parse_retry_after(header, NOW.astimezone(timezone(timedelta(hours=5)))) == 30.0
    assert parse_retry_after(header, NOW.replace(tzinfo=None)) == 30.0


def test_parse_retry_after_respects_a_custom_maximum() -> None:
    assert parse_retry_after("600", NOW, max_s=60.0) == 60.0


@given(st.integers(min_value=0, max_value=10**6))
def test_delta_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), NOW) == min(float(seconds), MAX_RETRY_AFTER_S)


@given(st.text(max_size=40))
def test_parse_retry_after_never_raises_and_stays_in_bounds(value: str) -> None:
    got = parse_retry_after(value, NOW)
    assert got is None or 0.0 <= got <= MAX_RETRY_AFTER_S
