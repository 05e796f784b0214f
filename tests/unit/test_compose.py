"""docker-compose.yml runs every mailbus process with healthchecks and ordered start-up;
Prometheus gets ops/alerts.yml and Grafana our dashboard over metrics mailbus exports.
(The compose-spec schema itself is checked by `make validate`.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_alert_rules import exported_names

REPO = Path(__file__).resolve().parents[2]
MAILBUS = {"relay", "consumer-p0", "consumer-p1", "consumer-p2", "intake", "webhooks", "console"}


def services() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return document["services"]  # type: ignore[no-any-return]


def test_every_service_is_there() -> None:
    expected = {
        "postgres", "kafka", "migrate", "console-users", "retention", "sandbox", "prometheus",
        "grafana",
    }  # fmt: skip
    expected |= MAILBUS
    assert set(services()) == expected


@pytest.mark.parametrize("name", sorted(MAILBUS))
def test_mailbus_processes_start_after_migrate_and_report_readiness(name: str) -> None:
    service = services()[name]
    assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert "/readyz" in " ".join(service["healthcheck"]["test"])
    assert service["environment"]["MAILBUS_METRICS_ADDR"] == "0.0.0.0"
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
    # Secrets as files only.
    assert not {"MAILBUS_DATABASE_URL", "MAILBUS_PROVIDER_API_KEY"} & set(service["environment"])


def test_commands_per_priority() -> None:
    for priority in ("p0", "p1", "p2"):
        assert services()[f"consumer-{priority}"]["command"] == ["consume", "--priority", priority]
    assert services()["intake"]["command"] == ["intake"]
    assert services()["webhooks"]["command"] == ["webhooks"]


def test_retention_runs_again_and_again_within_a_budget() -> None:
    service = services()["retention"]
    [loop] = service["command"]
    assert "mailbus retention run --budget" in loop and loop.startswith("while :;")
    assert "sleep" in loop and service["restart"] == "unless-stopped"
    assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]


def test_dependencies_name_conditions_and_long_running_services_have_healthchecks() -> None:
    for name, service in services().items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in services(), (name, dependency)
            assert rule["condition"] in {
                "service_healthy",
                "service_completed_successfully",
                "service_started",
            }
        if name not in ("migrate", "console-users", "retention"):  # jobs: they serve no probe
            assert "healthcheck" in service, name
    assert set(services()["migrate"]["depends_on"]) == {"postgres", "kafka"}


def test_secret_files_exist_and_prometheus_loads_the_alerts() -> None:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for secret in document["secrets"].values():
        assert (REPO / secret["file"]).is_file()
    mounts = services()["prometheus"]["volumes"]
    assert "./ops/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    config = yaml.safe_load((REPO / "ops/prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    assert {f"{name}:9100" for name in MAILBUS} <= targets


def test_dashboard_queries_use_exported_metrics() -> None:
    dashboard = json.loads((REPO / "ops/grafana/dashboards/mailbus.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 8
    used = {name for expr in exprs for name in re.findall(r"\bmailbus_[a-z0-9_]+", expr)}
    assert used and used <= exported_names(), used - exported_names()
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
