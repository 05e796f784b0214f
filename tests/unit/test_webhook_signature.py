"""The Mailbus-Signature header: what verifies and what is refused, and why."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.feedback.signature import TOLERANCE_S, sign, signature_header, verify

SECRET = "whsec_test_0123456789"
BODY = b'{"id":"evt_1","type":"delivered","message_id":"m1","occurred_at":"2026-12-01T06:00:00Z"}'
NOW = 1_780_000_000
PATH = "/webhooks/sandbox"


def test_a_valid_signature_verifies() -> None:
    header = signature_header(SECRET, PATH, BODY, NOW)
    assert verify(header, PATH, BODY, SECRET, NOW).ok


def test_the_digest_is_hmac_sha256_of_t_dot_path_dot_body() -> None:
    message = f"{NOW}.{PATH}.".encode() + BODY
    expected = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    assert sign(SECRET, PATH, BODY, NOW) == expected
    assert verify(f"t={NOW},v2={expected}", PATH, BODY, SECRET.encode(), NOW).ok


def test_a_request_replayed_to_another_path_is_a_mismatch() -> None:
    header = signature_header(SECRET, PATH, BODY, NOW)
    assert verify(header, "/webhooks/other", BODY, SECRET, NOW).reason == "mismatch"
    assert verify(header, PATH + "/", BODY, SECRET, NOW).reason == "mismatch"


def test_v1_alone_verifies_as_the_contract_says_and_cannot_rescue_a_bad_v2() -> None:
    # v1 signs "<t>.<body>" (docs/reference/contract.md#delivery-events): still accepted alone.
    v1 = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert verify(f"t={NOW},v1={v1}", PATH, BODY, SECRET, NOW).ok
    v2 = sign(SECRET, PATH, BODY, NOW)
    assert verify(f"t={NOW},v1={v1},v2={v2}", PATH, BODY, SECRET, NOW).ok
    # A header that carries v2 is held to it: replayed to another path, its v1 does not help.
    replayed = verify(f"t={NOW},v1={v1},v2={v2}", "/webhooks/other", BODY, SECRET, NOW)
    assert replayed.reason == "mismatch"


def test_a_tampered_body_is_a_mismatch() -> None:
    header = signature_header(SECRET, PATH, BODY, NOW)
    tampered = BODY.replace(b"delivered", b"complained")
    assert verify(header, PATH, tampered, SECRET, NOW).reason == "mismatch"
    assert verify(header, PATH, BODY + b" ", SECRET, NOW).reason == "mismatch"


def test_a_wrong_secret_is_a_mismatch() -> None:
    header = signature_header("another-secret-entirely", PATH, BODY, NOW)
    verdict = verify(header, PATH, BODY, SECRET, NOW)
    assert not verdict.ok and verdict.reason == "mismatch"


def test_a_changed_timestamp_breaks_the_signature() -> None:
    digest = sign(SECRET, PATH, BODY, NOW)
    assert verify(f"t={NOW + 1},v2={digest}", PATH, BODY, SECRET, NOW).reason == "mismatch"


@pytest.mark.parametrize("offset", [TOLERANCE_S + 1, 3600, 10**6])
def test_stale_and_future_timestamps_are_refused(offset: int) -> None:
    old = signature_header(SECRET, PATH, BODY, NOW - offset)
    future = signature_header(SECRET, PATH, BODY, NOW + offset)
    assert verify(old, PATH, BODY, SECRET, NOW).reason == "stale"
    assert verify(future, PATH, BODY, SECRET, NOW).reason == "stale"


@pytest.mark.parametrize("offset", [0, 1, TOLERANCE_S])
def test_timestamps_within_the_tolerance_verify(offset: int) -> None:
    assert verify(signature_header(SECRET, PATH, BODY, NOW - offset), PATH, BODY, SECRET, NOW).ok
    assert verify(signature_header(SECRET, PATH, BODY, NOW + offset), PATH, BODY, SECRET, NOW).ok


@pytest.mark.parametrize("header", [None, ""])
def test_a_missing_header_is_refused(header: str | None) -> None:
    assert verify(header, PATH, BODY, SECRET, NOW).reason == "missing"


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        "v2=" + "a" * 64,  # no t
        f"t={NOW}",  # no v2
        f"t={NOW},v2=xyz",  # not hex
        f"t={NOW},v2=" + "a" * 63,  # short
        f"t=-{NOW},v2=" + "a" * 64,
        f"t={NOW}.5,v2=" + "a" * 64,
        "t=abc,v2=" + "a" * 64,
        f"t={NOW},t={NOW},v2=" + "a" * 64,  # two timestamps
        f"t={NOW},v2=" + "a" * 64 + ",junk",
        "t=\uff11\uff12\uff13,v2=" + "a" * 64,  # fullwidth digits
        f"t={NOW},v2=" + "a" * 64 + ",x=" + "y" * 3000,  # oversized
    ],
)
def test_a_malformed_header_is_refused(header: str) -> None:
    assert verify(header, PATH, BODY, SECRET, NOW).reason == "malformed"


def test_a_stale_timestamp_is_only_reported_once_the_signature_holds() -> None:
    # A forger learns "mismatch", not whether the timestamp would have passed.
    forged = f"t={NOW - 10_000},v2=" + "0" * 64
    assert verify(forged, PATH, BODY, SECRET, NOW).reason == "mismatch"


def test_any_matching_v2_entry_verifies_secret_rotation() -> None:
    old = sign("old-secret-0123456", PATH, BODY, NOW)
    new = sign(SECRET, PATH, BODY, NOW)
    assert verify(f"t={NOW},v2={old},v2={new}", PATH, BODY, SECRET, NOW).ok
    assert verify(f"t={NOW}, v2={new.upper()}", PATH, BODY, SECRET, NOW).ok
    assert verify(f"t={NOW},v0=whatever,v2={new}", PATH, BODY, SECRET, NOW).ok


@given(body=st.binary(max_size=512), flip=st.integers(min_value=0, max_value=511))
def test_flipping_any_bit_of_the_body_is_a_mismatch(body: bytes, flip: int) -> None:
    header = signature_header(SECRET, PATH, body, NOW)
    assert verify(header, PATH, body, SECRET, NOW).ok
    if body:
        index = flip % len(body)
        changed = body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]
        assert verify(header, PATH, changed, SECRET, NOW).reason == "mismatch"
