"""ops/alerts.yml is a well-formed Prometheus rule file over metrics mailbus exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from mailbus import metrics

RULES = Path(__file__).resolve().parents[2] / "ops" / "alerts.yml"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def all_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def exported_names() -> set[str]:
    families = [*REGISTRY.collect(), *metrics.OutboxCollector("postgresql://unused").describe()]
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
        ("MailbusProvider429Rate", "mailbus_provider_429_total"),
        ("MailbusBreakerOpen", "== 2"),
        ("MailbusDeadLettersGrowing", "increase(mailbus_dead_letters_total[15m])) > 50"),
        ("MailbusConsumerLagGrowing", "mailbus_consumer_lag"),
    ],
)
def test_required_alerts(alert: str, fragment: str) -> None:
    rules = {rule["alert"]: rule for rule in all_rules()}
    assert fragment in rules[alert]["expr"]


def test_breaker_alert_waits_two_minutes() -> None:
    rules = {rule["alert"]: rule for rule in all_rules()}
    assert rules["MailbusBreakerOpen"]["for"] == "2m"
