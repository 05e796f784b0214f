"""ops/alerts.yml is a well-formed Prometheus rule file over metrics mailbus exports.

promtool itself (`promtool check rules`, `promtool test rules ops/alerts_test.yml`) runs in
`make validate`; these tests keep what promtool cannot see: every alert has a firing and
a quiet case in alerts_test.yml, and the runbooks name only commands that exist.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from mailbus.app.cli import _build_parser
from mailbus.relay.outbox_metrics import OutboxCollector

RULES = Path(__file__).resolve().parents[2] / "ops" / "alerts.yml"
RULE_TESTS = RULES.with_name("alerts_test.yml")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def all_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def exported_names() -> set[str]:
    families = [*REGISTRY.collect(), *OutboxCollector("postgresql://unused").describe()]
    return {
        family.name + suffix
        for family in families
        if family.name.startswith("mailbus_")
        for suffix in _SUFFIXES.get(family.type, ("",))
    }


def test_groups_and_rules_are_well_formed() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names = [group["name"] for group in document["groups"]]
    assert len(names) == len(set(names))
    alerts = [rule["alert"] for rule in all_rules()]
    assert len(alerts) == len(set(alerts))
    for rule in all_rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert {"summary", "description", "runbook"} <= set(rule["annotations"])
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"])
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")"), rule["alert"]
        assert expr.count("[") == expr.count("]"), rule["alert"]


def test_rules_only_use_exported_metrics() -> None:
    exported = exported_names()
    for rule in all_rules():
        used = set(re.findall(r"\bmailbus_[a-z0-9_]+", rule["expr"]))
        assert used, rule["alert"]
        assert used <= exported, (rule["alert"], used - exported)


@pytest.mark.parametrize(
    ("alert", "fragment"),
    [
        ("MailbusP0MailWaiting", '{priority="p0"}) > 60'),
        ("MailbusP1MailWaiting", '{priority="p1"}) > 900'),
        ("MailbusP2MailWaiting", '{priority="p2"}) > 7200'),
        ("MailbusHighFailureRate", 'outcome="failed"}[10m]'),
        ("MailbusProvider429Rate", "mailbus_provider_rate_limited_total"),
        ("MailbusBreakerOpen", "== 2"),
        ("MailbusDeadLettersGrowing", "increase(mailbus_dead_letters_total[15m])) > 50"),
        ("MailbusConsumerLagGrowing", "mailbus_consumer_lag"),
        ("MailbusSendEventsBacklog", "max(mailbus_send_events_unpublished) > 0"),
    ],
)
def test_required_alerts(alert: str, fragment: str) -> None:
    rules = {rule["alert"]: rule for rule in all_rules()}
    assert fragment in rules[alert]["expr"]


def test_breaker_alert_waits_two_minutes() -> None:
    rules = {rule["alert"]: rule for rule in all_rules()}
    assert rules["MailbusBreakerOpen"]["for"] == "2m"


def rule_tests() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULE_TESTS.read_text())
    assert document["rule_files"] == ["alerts.yml"]
    return [case for test in document["tests"] for case in test["alert_rule_test"]]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    alerts = {rule["alert"] for rule in all_rules()}
    firing = {case["alertname"] for case in rule_tests() if case["exp_alerts"]}
    quiet = {case["alertname"] for case in rule_tests() if not case["exp_alerts"]}
    assert alerts - firing == set(), "alerts without a firing promtool test"
    assert alerts - quiet == set(), "alerts without a not-firing promtool test"
    assert (firing | quiet) <= alerts, "tests of alerts that do not exist"


def mailbus_commands(text: str) -> list[list[str]]:
    """The `mailbus ...` commands quoted in backticks in ``text``, as argument lists."""
    return [span.split()[1:] for span in re.findall(r"`(mailbus [^`]+)`", text)]


def check_command(words: list[str]) -> None:
    """Raise AssertionError unless ``mailbus words...`` names a real (sub)command and options."""
    parser = _build_parser()
    choosing = True
    for word in words:
        if word.startswith("--"):
            assert word in parser._option_string_actions, (words, word)
            continue
        subcommands = [
            action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        ]
        if subcommands and choosing:
            assert word in subcommands[0].choices, (words, word)
            parser = subcommands[0].choices[word]
        else:
            choosing = False  # an argument value or placeholder (ID, pN, ...)
    assert not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions), words


def test_runbooks_name_only_existing_commands() -> None:
    seen = 0
    for rule in all_rules():
        for text in rule["annotations"].values():
            for words in mailbus_commands(text):
                check_command(words)
                seen += 1
    assert seen >= 8


@pytest.mark.parametrize(
    "command",
    ["mailbus campaign explode ID", "mailbus dlq", "mailbus dlq list --reasons x", "mailbus stat"],
)
def test_command_check_rejects_what_does_not_exist(command: str) -> None:
    [words] = mailbus_commands(f"`{command}`")
    with pytest.raises(AssertionError):
        check_command(words)
