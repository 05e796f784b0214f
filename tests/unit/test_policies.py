"""Degradation policies and the queue cap as values: matching, file checks, thresholds."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings
from mailbus_client.policies import (
    DEFAULT_CAP_SHARES,
    MailPolicy,
    PolicyBook,
    QueueCap,
    configured_policy_book,
    load_policy_book,
    parse_cap_shares,
    parse_policy_book,
    parse_queue_cap,
)

SHIPPED = load_policy_book(None)


@pytest.mark.parametrize(
    ("template", "name", "expire_after_s", "when_down"),
    [
        ("password_reset", "one_time_codes", 900.0, "wait"),
        ("password_reset_v2", "one_time_codes", 900.0, "wait"),
        ("otp", "one_time_codes", 900.0, "wait"),
        ("login_code_email", "one_time_codes", 900.0, "wait"),
        ("two_factor", "one_time_codes", 900.0, "wait"),
        ("magic_link", "one_time_codes", 900.0, "wait"),
        ("order_confirmation", "transactional", None, "wait"),
        ("order_shipped", "transactional", None, "wait"),
        ("invoice", "transactional", None, "wait"),
        ("receipt.refund", "transactional", None, "wait"),
        ("newsletter", "bulk", None, "pause"),
        ("campaign_spring", "bulk", None, "pause"),
        ("digest_weekly", "bulk", None, "pause"),
        ("internal_alert_disk", "internal_alerts", 3600.0, "fallback"),
        ("welcome", "default", None, "wait"),
        ("order", "default", None, "wait"),  # 'order_*' needs the underscore
        ("my_password_reset", "default", None, "wait"),  # globs anchor at the start
    ],
)
def test_shipped_policies(
    template: str, name: str, expire_after_s: float | None, when_down: str
) -> None:
    policy = SHIPPED.for_template(template)
    assert (policy.name, policy.expire_after_s, policy.when_provider_down) == (
        name,
        expire_after_s,
        when_down,
    )


def test_first_match_wins() -> None:
    book = PolicyBook(
        (
            MailPolicy("special", ("order_refund",), 60.0, "fallback"),
            MailPolicy("orders", ("order_*",), None, "wait"),
            MailPolicy("default", ("*",), None, "wait"),
        )
    )
    assert book.for_template("order_refund").name == "special"
    assert book.for_template("order_refund2").name == "orders"
    assert book.for_template("x").name == "default"


def test_a_book_must_end_with_a_catch_all() -> None:
    with pytest.raises(ValueError, match="'\\*'"):
        PolicyBook((MailPolicy("orders", ("order_*",)),))


def test_default_expires_at() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert SHIPPED.for_template("otp").default_expires_at(now) == now + timedelta(seconds=900)
    assert SHIPPED.for_template("order_confirmation").default_expires_at(now) is None


@given(st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,40}", fullmatch=True))
def test_every_template_gets_a_policy(template: str) -> None:
    assert SHIPPED.for_template(template) in SHIPPED.policies


def _entry(**fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": "default",
        "match": "*",
        "expire_after_s": None,
        "when_provider_down": "wait",
    }
    entry.update(fields)
    return entry


def test_a_single_glob_or_a_list() -> None:
    book = parse_policy_book(
        {"policies": [_entry(name="codes", match="otp*", expire_after_s=60), _entry()]}
    )
    assert book.for_template("otp_sms") == MailPolicy("codes", ("otp*",), 60.0, "wait")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "JSON object"),
        ({"policies": []}, "non-empty list"),
        ({"policies": [_entry()], "version": 2}, "unknown key 'version'"),
        ({"policies": [_entry(colour="red")]}, "policies[0] ('default'): unknown key 'colour'"),
        ({"policies": [_entry(expire_after_s=-5)]}, "'expire_after_s' must be in"),
        ({"policies": [_entry(expire_after_s="15m")]}, "'expire_after_s' must be a number"),
        ({"policies": [_entry(expire_after_s=True)]}, "'expire_after_s' must be a number"),
        ({"policies": [_entry(when_provider_down="drop")]}, "got 'drop'"),
        ({"policies": [_entry(match=[])]}, "'match' must be"),
        ({"policies": [_entry(match=["Order *"])]}, "'match' has 'Order *'"),
        ({"policies": [{"match": "*", "expire_after_s": None, "when_provider_down": "wait"}]},
         "policies[0]: 'name'"),
        ({"policies": [{"name": "d", "match": "*", "when_provider_down": "wait"}]},
         "missing 'expire_after_s'"),
        ({"policies": [_entry(name="orders", match="order_*")]}, "last entry must match '*'"),
        ({"policies": [_entry(), _entry(name="late", match="x*")]}, "('late'): unreachable"),
        ({"policies": [_entry(name="a", match="a*"), _entry(name="a")]}, "duplicate name"),
        ({"policies": ["*"]}, "policies[0]: expected a JSON object"),
    ],
)  # fmt: skip
def test_bad_policy_data_names_the_setting_and_the_entry(data: object, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_policy_book(data)
    assert error.value.setting == "MAILBUS_POLICY_FILE"
    assert problem in str(error.value)


def test_policy_file_errors_name_the_setting_and_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "policies.json"
    bad.write_text(json.dumps({"policies": [_entry(name="codes", when_provider_down="retry")]}))
    with pytest.raises(ConfigError) as error:
        load_policy_book(str(bad))
    message = str(error.value)
    assert message.startswith("MAILBUS_POLICY_FILE: ")
    assert str(bad) in message and "policies[0] ('codes')" in message

    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"MAILBUS_POLICY_FILE: .* is not valid JSON"):
        load_policy_book(str(bad))
    with pytest.raises(ConfigError, match="MAILBUS_POLICY_FILE: cannot read"):
        load_policy_book(str(tmp_path / "missing.json"))


def test_settings_check_the_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_POLICY_FILE": str(tmp_path / "missing.json")})
    assert error.value.setting == "MAILBUS_POLICY_FILE"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"policies": [_entry(expire_after_s=0)]}))
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_POLICY_FILE": str(bad)})
    assert error.value.setting == "MAILBUS_POLICY_FILE"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"policies": [_entry(expire_after_s=30)]}))
    assert load_settings({"MAILBUS_POLICY_FILE": str(good)}).policy_file == str(good)
    assert load_settings({}).policy_file is None


def test_configured_book_follows_the_environment(tmp_path: Path) -> None:
    custom = tmp_path / "policies.json"
    custom.write_text(json.dumps({"policies": [_entry(expire_after_s=30)]}))
    assert configured_policy_book({}) == SHIPPED
    book = configured_policy_book({"MAILBUS_POLICY_FILE": str(custom)})
    assert book.for_template("password_reset").expire_after_s == 30.0


@pytest.mark.parametrize(
    ("limit", "shares", "expected"),
    [
        (100, DEFAULT_CAP_SHARES, {"p2": 60, "p1": 90, "p0": 100}),
        (10, DEFAULT_CAP_SHARES, {"p2": 6, "p1": 9, "p0": 10}),
        (7, DEFAULT_CAP_SHARES, {"p2": 5, "p1": 7, "p0": 7}),  # 4.2 -> 5, 6.3 -> 7
        (1, DEFAULT_CAP_SHARES, {"p2": 1, "p1": 1, "p0": 1}),
        (1000, (0.5, 0.5, 0.8), {"p2": 500, "p1": 500, "p0": 800}),
    ],
)
def test_thresholds(
    limit: int, shares: tuple[float, float, float], expected: dict[str, int]
) -> None:
    cap = QueueCap(limit, shares)
    assert {p: cap.threshold(p) for p in expected} == expected


@pytest.mark.parametrize(
    ("open_rows", "admitted"),
    [
        (0, {"p0", "p1", "p2"}),
        (59, {"p0", "p1", "p2"}),
        (60, {"p0", "p1"}),
        (89, {"p0", "p1"}),
        (90, {"p0"}),
        (99, {"p0"}),
        (100, set()),
        (5000, set()),
    ],
)
def test_lowest_priority_is_refused_first(open_rows: int, admitted: set[str]) -> None:
    cap = QueueCap(100)
    assert {p for p in ("p0", "p1", "p2") if cap.admits(p, open_rows)} == admitted


@given(st.integers(min_value=1, max_value=10**9), st.integers(min_value=0, max_value=2 * 10**9))
def test_a_higher_priority_is_never_refused_before_a_lower_one(limit: int, open_rows: int) -> None:
    cap = QueueCap(limit)
    p0, p1, p2 = (cap.admits(p, open_rows) for p in ("p0", "p1", "p2"))
    assert p0 >= p1 >= p2
    assert p0 == (open_rows < limit)


def test_unbounded_admits_everything() -> None:
    assert QueueCap().threshold("p2") is None
    assert QueueCap().admits("p2", 10**12)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, DEFAULT_CAP_SHARES), ("", DEFAULT_CAP_SHARES), ("0.5, 0.75,1", (0.5, 0.75, 1.0))],
)
def test_cap_shares_parse(raw: str | None, expected: tuple[float, float, float]) -> None:
    assert parse_cap_shares(raw) == expected


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("0.6,0.9", "three numbers"),
        ("0.6,0.9,1,1", "three numbers"),
        ("a,b,c", "three numbers"),
        ("0,0.9,1", "in (0, 1]"),
        ("0.6,0.9,1.5", "in (0, 1]"),
        ("1.0,0.9,0.6", "must not decrease"),
    ],
)
def test_bad_cap_shares_name_the_setting(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_QUEUE_CAP_SHARES": raw})
    assert error.value.setting == "MAILBUS_QUEUE_CAP_SHARES"
    assert problem in error.value.problem


@pytest.mark.parametrize("raw", ["0", "-3", "lots", "1.5"])
def test_bad_queue_cap_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_QUEUE_CAP": raw})
    assert error.value.setting == "MAILBUS_QUEUE_CAP"


def test_queue_cap_from_settings_and_environment() -> None:
    env = {"MAILBUS_QUEUE_CAP": "5000", "MAILBUS_QUEUE_CAP_SHARES": "0.5,0.8,1"}
    settings = load_settings(env)
    assert (settings.queue_cap, settings.queue_cap_shares) == (5000, (0.5, 0.8, 1.0))
    assert QueueCap.from_environ(env) == QueueCap(5000, (0.5, 0.8, 1.0))
    assert QueueCap.from_environ({}) == QueueCap()
    assert parse_queue_cap(" ") is None
