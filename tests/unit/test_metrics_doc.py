"""The metric reference (docs/reference/metrics.md) is the code's, the names follow
Prometheus's conventions, and a deprecated name is still exported and used nowhere."""

from __future__ import annotations

import re
from pathlib import Path

from mailbus.app.metrics_doc import PAGE, document, registered
from mailbus.kernel.metrics import DEPRECATED

REPO = Path(__file__).resolve().parents[2]
# What dashboards, alerts and autoscalers read: none may read a deprecated name.
READERS = [
    REPO / "ops" / "alerts.yml",
    REPO / "ops" / "alerts_test.yml",
    *sorted((REPO / "ops" / "grafana").rglob("*.json")),
    *sorted((REPO / "k8s").rglob("*.yaml")),
]


def test_the_committed_metric_table_is_generated() -> None:
    page = PAGE.read_text()
    assert page == document(page), "docs/reference/metrics.md is stale: run `make docs`"


def test_names_follow_prometheus_conventions() -> None:
    for metric in registered():
        if metric.name in DEPRECATED:
            continue
        assert re.fullmatch(r"mailbus(_[a-z0-9]+)+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.type == "counter"), metric.name
        assert not re.search(r"_\d{3}(_|$)", metric.name), f"{metric.name}: a code in a name"
        assert not re.search(r"_(ms|milliseconds|minutes|hours)(_|$)", metric.name), metric.name
        assert metric.help, metric.name


def test_a_deprecated_name_is_exported_beside_its_replacement_and_read_nowhere() -> None:
    names = {metric.name: metric for metric in registered()}
    for old, new in DEPRECATED.items():
        assert old in names and new in names, old
        assert (names[old].type, names[old].labels) == (names[new].type, names[new].labels)
        assert old in (REPO / "docs" / "reference" / "stability.md").read_text(), old
        for reader in READERS:
            assert old not in reader.read_text(), f"{reader.relative_to(REPO)} reads {old}"
