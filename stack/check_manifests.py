"""Validate rendered Kubernetes manifests without a cluster (called by stack/validate.sh).

    python stack/check_manifests.py NAME RENDERED.yaml [...]
    python stack/check_manifests.py --write-prometheusrule   # after editing ops/alerts.yml
                                   # or the dashboard: writes every file generated from them
    python stack/check_manifests.py --dashboard-rules DASHBOARD.json  # its PromQL as rules

Every document of a built-in kind is checked by ``kubernetes-validate --strict`` (the
Kubernetes OpenAPI schemas it ships, unexpected properties rejected) against
the Kubernetes versions in ``MAILBUS_K8S_VERSIONS`` (default: 1.30.0, the oldest we
support, and the newest the package ships). The custom
resources below have no schema there; they are listed as skipped, with the few checks we
can make ourselves: a PrometheusRule's groups go through ``promtool check rules`` (when
``PROMTOOL`` names it), a ScaledObject must name its target and triggers. A document of any
other kind without a shipped schema fails: a typo in ``kind`` must not pass as a CRD.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes_validate import utils as kv

__all__ = [
    "CUSTOM_KINDS",
    "check",
    "configured_ports",
    "dashboard_rules",
    "egress_allows",
    "grafana_dashboard",
    "main",
    "prometheus_rule",
    "runbook_alerts",
    "unreachable_settings",
]

# (apiVersion, kind) of the custom resources we ship; the CRDs come with KEDA and the
# Prometheus Operator, not with Kubernetes, so kubernetes-validate has no schema for them.
CUSTOM_KINDS = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
K8S_VERSIONS = os.environ.get("MAILBUS_K8S_VERSIONS", f"1.30.0 {kv.latest_version()}").split()
REPO = Path(__file__).resolve().parents[1]
ALERTS = REPO / "ops" / "alerts.yml"
PROMETHEUS_RULE = REPO / "k8s" / "base" / "prometheusrule.yaml"
DASHBOARD = REPO / "ops" / "grafana" / "dashboards" / "mailbus.json"
DASHBOARD_CONFIGMAP = (
    REPO / "k8s" / "components" / "kube-prometheus-stack" / "grafana-dashboard.yaml"
)
RUNBOOK = REPO / "docs" / "runbook.md"
RUNBOOK_BEGIN = "<!-- alerts: generated from ops/alerts.yml by stack/check_manifests.py -->"
RUNBOOK_END = "<!-- end of the alerts -->"


def prometheus_rule() -> str:
    """k8s/base/prometheusrule.yaml: the PrometheusRule carrying ops/alerts.yml's groups."""
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mailbus", "labels": {"app.kubernetes.io/component": "alerts"}},
        "spec": {"groups": yaml.safe_load(ALERTS.read_text())["groups"]},
    }
    header = (
        "# Generated from ops/alerts.yml by `python stack/check_manifests.py"
        " --write-prometheusrule`;\n# do not edit (tests/unit/test_k8s_manifests.py keeps"
        " them equal).\n"
    )
    return header + str(yaml.safe_dump(resource, sort_keys=False, width=100))


def grafana_dashboard() -> str:
    """k8s/components/kube-prometheus-stack/grafana-dashboard.yaml: ops/grafana's dashboard
    as a ConfigMap Grafana's dashboard sidecar loads (label ``grafana_dashboard``)."""
    resource = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "mailbus-grafana-dashboard",
            "labels": {
                "app.kubernetes.io/name": "mailbus",
                "app.kubernetes.io/component": "dashboard",
                "grafana_dashboard": "1",
            },
        },
        "data": {"mailbus.json": DASHBOARD.read_text()},
    }
    header = (
        "# Generated from ops/grafana/dashboards/mailbus.json by `python"
        " stack/check_manifests.py\n# --write-prometheusrule`; do not edit"
        " (tests/unit/test_k8s_manifests.py keeps them equal).\n"
    )
    return header + str(yaml.safe_dump(resource, sort_keys=False, width=100))


def runbook_alerts(page: str) -> str:
    """``page`` (docs/runbook.md) with its alerts section generated from ops/alerts.yml: one
    heading per alert, the anchor its ``runbook_url`` links."""
    sections = []
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            notes = rule["annotations"]
            sections.append(
                f"### {rule['alert']}\n\n*{rule['labels']['severity']}*: {notes['description']}"
                f"\n\n{notes['runbook']}\n"
            )
    head, found, rest = page.partition(RUNBOOK_BEGIN + "\n")
    if not found or RUNBOOK_END not in rest:
        raise ValueError(f"{RUNBOOK} has no {RUNBOOK_BEGIN!r} … {RUNBOOK_END!r} section")
    return (
        head
        + RUNBOOK_BEGIN
        + "\n\n"
        + "\n".join(sections)
        + "\n"
        + RUNBOOK_END
        + (rest.split(RUNBOOK_END, 1)[1])
    )


def check(name: str, documents: list[dict[str, Any]]) -> list[str]:
    """Problems found in ``documents`` (empty: all good); runs kubernetes-validate."""
    problems = [f"{name}: {problem}" for problem in unreachable_settings(documents)]
    builtin: list[dict[str, Any]] = []
    for doc in documents:
        api_kind = (doc.get("apiVersion", ""), doc.get("kind", ""))
        ident = f"{api_kind[1]}/{doc.get('metadata', {}).get('name', '?')}"
        problems += [f"{name}: {ident}: {problem}" for problem in _house_rules(doc)]
        if api_kind in CUSTOM_KINDS:
            print(f"{name}: skipped {ident} ({api_kind[0]}: a CRD, no schema shipped)")
            problems += _check_custom(name, ident, doc)
            continue
        try:
            kv.validate(doc, K8S_VERSIONS[0], strict=True)
        except kv.SchemaNotFoundError:
            problems.append(f"{name}: {ident}: no schema for {api_kind[0]} {api_kind[1]}")
            continue
        except kv.ValidationError:
            pass  # reported in full by the command below
        builtin.append(doc)
    if builtin:
        with tempfile.NamedTemporaryFile("w", suffix=f"-{name}.yaml") as handle:
            yaml.safe_dump_all(builtin, handle, sort_keys=False)
            handle.flush()
            for version in K8S_VERSIONS:
                command = ["kubernetes-validate", "--strict", "--quiet", "-k", version]
                if subprocess.run([*command, handle.name], check=False).returncode != 0:
                    problems.append(f"{name}: kubernetes-validate --strict -k {version} failed")
                else:
                    print(f"{name}: {len(builtin)} built-in resources valid (Kubernetes {version})")
    return problems


def _house_rules(doc: dict[str, Any]) -> list[str]:
    """What review asks of every manifest beyond its schema (labels, pod security)."""
    problems = []
    metadata = doc.get("metadata", {})
    labels = metadata.get("labels", {})
    for label in ("app.kubernetes.io/name", "app.kubernetes.io/component"):
        if label not in labels and doc.get("kind") not in _WHOLE_APP_KINDS:
            problems.append(f"no {label} label")
    if not metadata.get("namespace"):
        problems.append("no namespace (set one in the overlay)")
    spec = doc.get("spec", {})
    pod = spec.get("jobTemplate", {}).get("spec", spec).get("template", {}).get("spec")
    if pod is None:
        return problems
    context = pod.get("securityContext", {})
    if not context.get("runAsNonRoot") or not isinstance(context.get("runAsUser"), int):
        problems.append("pod lacks runAsNonRoot and a numeric runAsUser")
    if context.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problems.append("pod lacks seccompProfile RuntimeDefault")
    for container in pod.get("containers", []):
        own = container.get("securityContext", {})
        if not own.get("readOnlyRootFilesystem") or own.get("allowPrivilegeEscalation", True):
            problems.append(f"{container['name']}: root filesystem writable or escalation allowed")
        if own.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{container['name']}: capabilities not dropped (ALL)")
        resources = container.get("resources", {})
        if not {"cpu", "memory"} <= set(resources.get("requests", {})) or "memory" not in (
            resources.get("limits", {})
        ):
            problems.append(f"{container['name']}: no cpu/memory requests and memory limit")
        for env in container.get("env", []):
            if "value" in env and _looks_secret(env["name"]):
                problems.append(f"{container['name']}: {env['name']} set inline (use _FILE)")
        if doc.get("kind") == "Deployment" and not (
            "readinessProbe" in container and "livenessProbe" in container
        ):
            problems.append(f"{container['name']}: no readiness and liveness probes")
    return problems


# Settings holding the URL of a server the pods call (host:port lists are Kafka's).
_URL_SETTINGS = (
    "MAILBUS_PROVIDER_URL",
    "MAILBUS_FALLBACK_PROVIDER_URL",
    "MAILBUS_SES_ENDPOINT_URL",
    "MAILBUS_SCHEMA_REGISTRY_URL",
    "MAILBUS_KAFKA_OAUTH_TOKEN_URL",
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def configured_ports(data: dict[str, str]) -> dict[str, set[int]]:
    """The TCP ports a mailbus ConfigMap's settings make the pods connect to, by setting:
    each port of ``MAILBUS_KAFKA_BOOTSTRAP`` (9092 when none is given) and the port of each
    URL setting (the scheme's when none is given)."""
    ports: dict[str, set[int]] = {}
    if data.get("MAILBUS_KAFKA_BOOTSTRAP"):
        ports["MAILBUS_KAFKA_BOOTSTRAP"] = {
            int(server.rsplit(":", 1)[1]) if ":" in server else 9092
            for server in (s.strip() for s in data["MAILBUS_KAFKA_BOOTSTRAP"].split(","))
            if server
        }
    for setting in _URL_SETTINGS:
        if data.get(setting):
            url = urlsplit(data[setting])
            ports[setting] = {url.port or _DEFAULT_PORTS.get(url.scheme, 443)}
    return ports


def egress_allows(policies: list[dict[str, Any]], port: int) -> bool:
    """Whether one of these NetworkPolicies' egress rules lets TCP ``port`` out (a rule
    without ports allows every port; named ports are not resolved)."""
    for policy in policies:
        for rule in policy.get("spec", {}).get("egress", []):
            allowed = rule.get("ports")
            if not allowed:
                return True
            for entry in allowed:
                first = entry.get("port")
                if entry.get("protocol", "TCP") != "TCP" or not isinstance(first, int):
                    continue
                if first <= port <= entry.get("endPort", first):
                    return True
    return False


def unreachable_settings(documents: list[dict[str, Any]]) -> list[str]:
    """The egress NetworkPolicies of the mailbus pods must let through every port their
    ConfigMap names: a schema registry on 8081, Kafka's SASL listener on 9096, ... (the
    components under k8s/components add both together)."""
    policies = [
        doc
        for doc in documents
        if doc.get("kind") == "NetworkPolicy" and "Egress" in doc["spec"].get("policyTypes", [])
    ]
    if not policies:
        return []
    problems = []
    for doc in documents:
        if doc.get("kind") != "ConfigMap" or doc["metadata"]["name"] != "mailbus":
            continue
        for setting, ports in configured_ports(doc.get("data", {})).items():
            for port in sorted(ports):
                if not egress_allows(policies, port):
                    problems.append(
                        f"{setting} names port {port}, which no egress NetworkPolicy lets"
                        " through (k8s/components: schema-registry, kafka-sasl)"
                    )
    return problems


# Kinds that describe the whole application rather than one component.
_WHOLE_APP_KINDS = {"ServiceAccount", "ConfigMap", "NetworkPolicy", "ServiceMonitor"}


def _looks_secret(name: str) -> bool:
    return not name.endswith("_FILE") and any(
        word in name for word in ("PASSWORD", "SECRET", "API_KEY", "DATABASE_URL", "TOKEN")
    )


def _check_custom(name: str, ident: str, doc: dict[str, Any]) -> list[str]:
    spec = doc.get("spec") or {}
    target = spec.get("scaleTargetRef", {}).get("name")
    if doc["kind"] == "ScaledObject" and not (target and spec.get("triggers")):
        return [f"{name}: {ident} needs spec.scaleTargetRef.name and spec.triggers"]
    if doc["kind"] == "PrometheusRule" and os.environ.get("PROMTOOL"):
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as handle:
            yaml.safe_dump({"groups": spec.get("groups", [])}, handle, sort_keys=False)
            handle.flush()
            run = subprocess.run(
                [os.environ["PROMTOOL"], "check", "rules", handle.name],
                check=False,
                capture_output=True,
                text=True,
            )
        if run.returncode != 0:
            return [f"{name}: {ident}: promtool check rules: {run.stdout}{run.stderr}"]
    return []


def dashboard_rules(path: Path) -> str:
    """A Grafana dashboard's queries as recording rules, for ``promtool check rules``."""
    dashboard = json.loads(path.read_text())
    rules = [
        {"record": f"dashboard:panel{panel['id']}:{target['refId']}", "expr": target["expr"]}
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    return str(yaml.safe_dump({"groups": [{"name": path.stem, "rules": rules}]}, sort_keys=False))


def main(argv: list[str]) -> int:
    if argv == ["--write-prometheusrule"]:
        PROMETHEUS_RULE.write_text(prometheus_rule())
        DASHBOARD_CONFIGMAP.write_text(grafana_dashboard())
        RUNBOOK.write_text(runbook_alerts(RUNBOOK.read_text()))
        return 0
    if len(argv) == 2 and argv[0] == "--dashboard-rules":
        print(dashboard_rules(Path(argv[1])), end="")
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    name, paths = argv[0], argv[1:]
    documents = [doc for path in paths for doc in yaml.safe_load_all(Path(path).read_text()) if doc]
    if not documents:
        print(f"{name}: no manifests in {paths}", file=sys.stderr)
        return 1
    problems = check(name, documents)
    for problem in problems:
        print(f"ERROR {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
