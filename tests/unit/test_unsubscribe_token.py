"""Unsubscribe tokens: made and verified with the secret and time passed in; anything not
signed with that secret is refused, never raises."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.campaigns.unsubscribe import (
    Links,
    Unsubscribe,
    hmac_pads,
    make_token,
    signing_key,
    verify_token,
)
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings

SECRET = "unsub_test_secret_0123456789"
T0 = 1_764_576_000


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_valid_token_says_who_and_which_campaign() -> None:
    token = make_token(SECRET, " Ana@Example.COM ", 42, T0)
    assert verify_token(token, SECRET, T0 + 10**8) == Unsubscribe("ana@example.com", 42, T0)
    assert Unsubscribe("ana@example.com", 42, T0).source == "campaign:42"


def test_the_token_is_url_safe() -> None:
    token = make_token(SECRET, "a+b/c=d@example.com", 7, T0)
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def test_a_tampered_payload_is_refused() -> None:
    token = make_token(SECRET, "ana@example.com", 42, T0)
    _payload, signature = token.split(".")
    for forged in (
        f"1:43:{T0}:ana@example.com",  # another campaign
        f"1:42:{T0}:bob@example.com",  # another address
        f"1:42:{T0 + 1}:ana@example.com",
    ):
        assert verify_token(f"{_b64(forged.encode())}.{signature}", SECRET, T0) is None


def test_a_tampered_signature_is_refused() -> None:
    token = make_token(SECRET, "ana@example.com", 42, T0)
    payload, signature = token.split(".")
    flipped = "A" if signature[0] != "A" else "B"
    assert verify_token(f"{payload}.{flipped}{signature[1:]}", SECRET, T0) is None
    assert verify_token(f"{payload}.{signature[:-2]}", SECRET, T0) is None
    assert verify_token(f"{payload}.", SECRET, T0) is None


def test_another_secret_is_refused() -> None:
    token = make_token("another secret", "ana@example.com", 42, T0)
    assert verify_token(token, SECRET, T0) is None
    assert verify_token(make_token(SECRET, "ana@example.com", 42, T0), "", T0) is None


def test_another_version_is_refused_even_when_signed() -> None:
    payload = f"2:42:{T0}:ana@example.com".encode()
    signature = hmac.new(SECRET.encode(), payload, hashlib.sha256).digest()
    assert verify_token(f"{_b64(payload)}.{_b64(signature)}", SECRET, T0) is None


@pytest.mark.parametrize(
    "garbage",
    ["", ".", "..", "abc", "a.b.c", "!!!.???", "a b.c", "A.B", "x" * 5000, "Zm9v.YmFy", "é.é"],
)
def test_garbage_is_refused(garbage: str) -> None:
    assert verify_token(garbage, SECRET, T0) is None


@given(st.text(max_size=300))
def test_verify_never_raises(text: str) -> None:
    assert verify_token(text, SECRET, T0) is None


def test_max_age_is_optional() -> None:
    token = make_token(SECRET, "ana@example.com", 1, T0)
    assert verify_token(token, SECRET, T0 + 100, max_age_s=100) is not None
    assert verify_token(token, SECRET, T0 + 101, max_age_s=100) is None


@pytest.mark.parametrize("secret", ["k", "x" * 64, "y" * 65, "z" * 200, b"\x00\xff" * 40])
def test_hmac_pads_compute_the_tokens_hmac_sha256(secret: str | bytes) -> None:
    """What the fan-out's SQL computes with them is HMAC-SHA256 (RFC 2104), the very
    signature :func:`make_token` makes."""
    inner, outer = hmac_pads(secret)
    message = f"1:42:{T0}:ana@example.com".encode()
    spelled = hashlib.sha256(outer + hashlib.sha256(inner + message).digest()).digest()
    token = make_token(secret, "ana@example.com", 42, T0)
    assert token == f"{_b64(message)}.{_b64(spelled)}"
    assert verify_token(token, secret, T0) == Unsubscribe("ana@example.com", 42, T0)


@pytest.mark.parametrize("secret", [SECRET, "x" * 64, "z" * 200])
def test_the_pads_never_give_back_the_secret(secret: str) -> None:
    """The pads travel as bind parameters, visible where parameters are logged; XORed
    back they give the derived signing key, a one-way HMAC of the secret, never the
    secret."""
    inner, outer = hmac_pads(secret)
    for pad, byte in ((inner, 0x36), (outer, 0x5C)):
        key = bytes(b ^ byte for b in pad).rstrip(b"\0")
        assert secret.encode() not in key and key not in secret.encode()
        assert key != hashlib.sha256(secret.encode()).digest()
        assert key == signing_key(secret)


def test_a_link_of_the_previous_secret_verifies_while_it_is_configured() -> None:
    old = "unsub_old_secret_9876543210"
    token = make_token(old, "ana@example.com", 42, T0)
    assert verify_token(token, SECRET, T0, previous=old) == Unsubscribe("ana@example.com", 42, T0)
    assert verify_token(token, SECRET, T0) is None  # rotated out: refused
    assert verify_token(token, "", T0, previous=old) is None  # no secret: links are off
    new = make_token(SECRET, "ana@example.com", 42, T0)
    assert verify_token(new, SECRET, T0, previous=old) is not None


@pytest.mark.parametrize("secret", [SECRET, "unsub_old_secret_9876543210"])
def test_links_signed_before_the_derived_key_still_verify(secret: str) -> None:
    """Links sent before this release were the secret's own HMAC: upgrading voids none."""
    payload = f"1:42:{T0}:ana@example.com".encode()
    signature = hmac.new(secret.encode(), payload, hashlib.sha256).digest()
    legacy = f"{_b64(payload)}.{_b64(signature)}"
    said = verify_token(legacy, SECRET, T0, previous="unsub_old_secret_9876543210")
    assert said == Unsubscribe("ana@example.com", 42, T0)


def test_links_need_a_secret_and_a_base_url() -> None:
    assert Links.of("", "https://x.test") is None
    assert Links.of("", None) is None
    with pytest.raises(ConfigError) as missing:
        Links.of(SECRET, None)
    assert missing.value.setting == "MAILBUS_UNSUBSCRIBE_BASE_URL"
    links = Links.of(SECRET, "https://x.test/mail/")
    assert links is not None and links.url("t.s") == "https://x.test/mail/unsubscribe/t.s"


def test_settings_read_the_secret_from_a_file_and_check_the_base_url(tmp_path: Path) -> None:
    secret_file = tmp_path / "unsubscribe_secret"
    secret_file.write_text(SECRET + "\n")
    settings = load_settings(
        {
            "MAILBUS_UNSUBSCRIBE_SECRET_FILE": str(secret_file),
            "MAILBUS_UNSUBSCRIBE_BASE_URL": "https://mail.example.test",
        }
    )
    assert Links.of(settings.unsubscribe_secret, settings.unsubscribe_base_url) == Links(
        SECRET, "https://mail.example.test"
    )
    assert load_settings({}).unsubscribe_secret == ""
    with pytest.raises(ConfigError) as bad:
        load_settings({"MAILBUS_UNSUBSCRIBE_BASE_URL": "ftp://mail.example.test"})
    assert bad.value.setting == "MAILBUS_UNSUBSCRIBE_BASE_URL"


def test_the_previous_secret_is_a_setting_with_a_file_and_needs_the_current_one(
    tmp_path: Path,
) -> None:
    previous = tmp_path / "previous"
    previous.write_text(SECRET + "\n")
    settings = load_settings(
        {
            "MAILBUS_UNSUBSCRIBE_SECRET": "unsub_rotated_secret_9876543210",
            "MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS_FILE": str(previous),
        }
    )
    assert settings.unsubscribe_secret_previous == SECRET
    assert load_settings({}).unsubscribe_secret_previous == ""
    with pytest.raises(ConfigError) as alone:
        load_settings({"MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS": SECRET})
    assert str(alone.value) == (
        "MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS: set without MAILBUS_UNSUBSCRIBE_SECRET"
    )
