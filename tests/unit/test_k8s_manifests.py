"""The k8s/ checks of stack/check_manifests.py, and the PrometheusRule kept equal to
ops/alerts.yml. Rendering with kustomize and the schema checks run in `make validate`."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_manifests", REPO / "stack/check_manifests.py")
assert _spec is not None and _spec.loader is not None
check_manifests = importlib.util.module_from_spec(_spec)
sys.modules["check_manifests"] = check_manifests
_spec.loader.exec_module(check_manifests)


def base_documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((REPO / "k8s/base" / name).read_text()) if doc]


def deployment() -> dict[str, Any]:
    """The relay Deployment with what the base's pod-defaults patch adds, in a namespace."""
    [relay] = copy.deepcopy(base_documents("relay.yaml"))
    [defaults] = base_documents("pod-defaults.yaml")
    pod, extra = relay["spec"]["template"]["spec"], defaults["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container.update({k: v for k, v in extra["containers"][0].items() if k != "name"})
    pod["securityContext"] = extra["securityContext"]
    relay["metadata"].update(namespace="mailbus")
    relay["metadata"]["labels"]["app.kubernetes.io/name"] = "mailbus"
    return relay


def test_prometheus_rule_carries_the_alert_rules() -> None:
    assert (
        REPO / "k8s/base/prometheusrule.yaml"
    ).read_text() == check_manifests.prometheus_rule(), (
        "run: python stack/check_manifests.py --write-prometheusrule"
    )
    [rule] = base_documents("prometheusrule.yaml")
    alerts = yaml.safe_load((REPO / "ops/alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]


def test_the_dashboard_configmap_and_the_runbook_alerts_are_generated() -> None:
    hint = "run: python stack/check_manifests.py --write-prometheusrule"
    assert check_manifests.DASHBOARD_CONFIGMAP.read_text() == check_manifests.grafana_dashboard()
    runbook = check_manifests.RUNBOOK.read_text()
    assert runbook == check_manifests.runbook_alerts(runbook), hint
    [configmap] = yaml.safe_load_all(check_manifests.DASHBOARD_CONFIGMAP.read_text())
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["mailbus.json"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in dashboard["panels"]:  # every query asks the chosen datasource
        for source in [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]:
            assert source == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_every_alert_links_its_runbook_section() -> None:
    anchors = {
        heading.lower()
        for heading in re.findall(r"^### (\w+)$", check_manifests.RUNBOOK.read_text(), re.M)
    }
    alerts = yaml.safe_load((REPO / "ops/alerts.yml").read_text())
    for rule in (rule for group in alerts["groups"] for rule in group["rules"]):
        url = rule["annotations"]["runbook_url"]
        assert url == f"https://mailbus.example.com/docs/runbook/#{rule['alert'].lower()}"
        assert rule["alert"].lower() in anchors, rule["alert"]


def test_kube_prometheus_stack_selects_the_rules_and_the_monitor() -> None:
    component = yaml.safe_load(
        (REPO / "k8s/components/kube-prometheus-stack/kustomization.yaml").read_text()
    )
    [patch] = component["patches"]
    assert patch["target"]["kind"] == "(ServiceMonitor|PrometheusRule)"
    assert yaml.safe_load(patch["patch"]) == [
        {"op": "add", "path": "/metadata/labels/release", "value": "kube-prometheus-stack"}
    ]
    prod = yaml.safe_load((REPO / "k8s/overlays/prod/kustomization.yaml").read_text())
    assert "../../components/kube-prometheus-stack" in prod["components"]


def test_a_complete_deployment_passes_the_house_rules() -> None:
    assert check_manifests._house_rules(deployment()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["metadata"].pop("namespace"), "no namespace"),
        (lambda d: d["metadata"]["labels"].pop("app.kubernetes.io/name"), "no app.kubernetes.io"),
        (lambda d: d["spec"]["template"]["spec"]["securityContext"].pop("runAsUser"), "numeric"),
        (
            lambda d: d["spec"]["template"]["spec"]["securityContext"].pop("seccompProfile"),
            "seccompProfile",
        ),
        (lambda d: _container(d)["securityContext"].pop("readOnlyRootFilesystem"), "writable"),
        (lambda d: _container(d)["securityContext"]["capabilities"].update(drop=[]), "ALL"),
        (lambda d: _container(d)["resources"].pop("limits"), "memory limit"),
        (lambda d: _container(d).pop("readinessProbe"), "probes"),
        (
            lambda d: _container(d)["env"].append(
                {"name": "MAILBUS_PROVIDER_API_KEY", "value": "x"}
            ),
            "MAILBUS_PROVIDER_API_KEY set inline",
        ),
        (
            lambda d: _container(d)["env"].append(
                {"name": "MAILBUS_DATABASE_URL", "value": "postgresql://u:p@db/x"}
            ),
            "MAILBUS_DATABASE_URL set inline",
        ),
    ],
)
def test_house_rules_catch(change: Any, problem: str) -> None:
    doc = deployment()
    change(doc)
    assert any(problem in found for found in check_manifests._house_rules(doc)), problem


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
    return container


def test_unknown_kind_is_not_taken_for_a_crd() -> None:
    doc = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudgt",
        "metadata": {
            "name": "x",
            "namespace": "n",
            "labels": {"app.kubernetes.io/name": "mailbus", "app.kubernetes.io/component": "relay"},
        },
        "spec": {"maxUnavailable": 1},
    }
    problems = check_manifests.check("t", [doc])
    assert any("no schema for policy/v1 PodDisruptionBudgt" in p for p in problems)


def test_scaled_object_without_triggers_is_refused() -> None:
    [scaled, *_] = yaml.safe_load_all((REPO / "k8s/components/keda/scaledobjects.yaml").read_text())
    scaled["metadata"]["namespace"] = "mailbus"
    assert check_manifests.check("t", [scaled]) == []
    scaled["spec"]["triggers"] = []
    assert any("spec.triggers" in p for p in check_manifests.check("t", [scaled]))


def test_every_priority_has_a_consumer_pdb_and_scaler() -> None:
    consumers = {d["metadata"]["name"]: d for d in base_documents("consumers.yaml")}
    pdbs = {d["metadata"]["name"] for d in base_documents("pdb.yaml")}
    scalers = yaml.safe_load_all((REPO / "k8s/components/keda/scaledobjects.yaml").read_text())
    topics = {
        s["spec"]["scaleTargetRef"]["name"]: s["spec"]["triggers"][0]["metadata"] for s in scalers
    }
    for priority in ("p0", "p1", "p2"):
        name = f"mailbus-consumer-{priority}"
        assert consumers[name]["spec"]["template"]["spec"]["containers"][0]["args"] == [
            "consume",
            "--priority",
            priority,
        ]
        assert name in pdbs
        assert f'mailbus_consumer_lag{{topic="mailbus.send.{priority}"}}' in topics[name]["query"]


def test_the_migrate_job_sets_the_grants_of_what_it_migrates() -> None:
    """Without --roles, the tables an upgrade adds stay ungranted until someone remembers
    (review 2026-12-06 hole 10); and it gives up waiting for locks before its deadline."""
    [job] = base_documents("migrate-job.yaml")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["migrate", "--roles"]
    assert float(args[args.index("--max-wait") + 1]) < job["spec"]["activeDeadlineSeconds"]
