"""The egress NetworkPolicy follows the configuration (issue 22 item 7): the schema
registry's port and Kafka SASL's 9096 are let through exactly when the rendered ConfigMap
configures them (k8s/components/schema-registry, k8s/components/kafka-sasl), and
stack/check_manifests.py refuses any overlay whose ConfigMap names a port the policy
does not allow."""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_render import REPO, kustomize_command, render

_spec = importlib.util.spec_from_file_location("check_manifests", REPO / "stack/check_manifests.py")
assert _spec is not None and _spec.loader is not None
check_manifests = importlib.util.module_from_spec(_spec)
sys.modules["check_manifests"] = check_manifests
_spec.loader.exec_module(check_manifests)

OVERLAYS = sorted(path.name for path in (REPO / "k8s/overlays").iterdir() if path.is_dir())
KAFKA_WORKLOADS = {"migrate", "relay", "consumer-p0", "consumer-p1", "consumer-p2", "intake"}
COMPONENTS = {"": [], "registry": ["schema-registry"], "sasl": ["kafka-sasl"]}
COMPONENTS["both"] = COMPONENTS["registry"] + COMPONENTS["sasl"]


@pytest.fixture(scope="module")
def kustomize() -> list[str]:
    return kustomize_command()


def with_components(tmp: Path, overlay: str, components: list[str]) -> Path:
    """A kustomization of ``overlay`` plus ``components`` (kustomize wants relative paths)."""
    k8s = Path(os.path.relpath(REPO / "k8s", tmp))
    (tmp / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{k8s / 'overlays' / overlay}]\n"
        f"components: [{', '.join(str(k8s / 'components' / c) for c in components)}]\n"
    )
    return tmp


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def allows(docs: list[dict[str, Any]], port: int) -> bool:
    return bool(check_manifests.egress_allows([one(docs, "NetworkPolicy", "mailbus-egress")], port))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_lets_out_the_ports_its_configmap_names(
    kustomize: list[str], overlay: str
) -> None:
    docs = render(kustomize, f"k8s/overlays/{overlay}")
    assert check_manifests.unreachable_settings(docs) == []
    data = one(docs, "ConfigMap", "mailbus")["data"]
    assert "MAILBUS_SCHEMA_REGISTRY_URL" not in data and not allows(docs, 8081)
    assert "MAILBUS_KAFKA_SECURITY_PROTOCOL" not in data and not allows(docs, 9096)


@pytest.mark.parametrize("choice", ["registry", "sasl", "both"])
def test_registry_and_sasl_ports_open_exactly_when_configured(
    kustomize: list[str], tmp_path: Path, choice: str
) -> None:
    docs = render(kustomize, with_components(tmp_path, "prod", COMPONENTS[choice]))
    data = one(docs, "ConfigMap", "mailbus")["data"]
    registry, sasl = choice in ("registry", "both"), choice in ("sasl", "both")
    assert (data.get("MAILBUS_SCHEMA_REGISTRY_URL") == "http://schema-registry:8081") is registry
    assert allows(docs, 8081) is registry
    assert (data.get("MAILBUS_KAFKA_SECURITY_PROTOCOL") == "SASL_SSL") is sasl
    assert allows(docs, 9096) is sasl
    assert check_manifests.unreachable_settings(docs) == []
    # With SASL, every pod that talks to Kafka reads the password from a mounted file.
    readers = set()
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        [container] = pod["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if "MAILBUS_KAFKA_SASL_PASSWORD_FILE" in env:
            readers.add(doc["metadata"]["labels"]["app.kubernetes.io/component"])
            [volume] = [v for v in pod["volumes"] if v["name"] == "kafka"]
            assert volume["secret"]["items"] == [{"key": "sasl-password", "path": "sasl-password"}]
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            assert env["MAILBUS_KAFKA_SASL_PASSWORD_FILE"] == f"{mounts['kafka']}/sasl-password"
    assert readers == (KAFKA_WORKLOADS if sasl else set())
    if choice == "both":  # what `make validate` checks of the real overlays
        assert check_manifests.check("prod+components", docs) == []


def test_a_configured_port_the_policy_does_not_allow_is_refused(kustomize: list[str]) -> None:
    docs = render(kustomize, "k8s/overlays/prod")
    data = one(docs, "ConfigMap", "mailbus")["data"]
    data["MAILBUS_SCHEMA_REGISTRY_URL"] = "https://registry.internal:8081"
    data["MAILBUS_KAFKA_BOOTSTRAP"] = "b-1.msk:9096,b-2.msk:9096"
    data["MAILBUS_KAFKA_OAUTH_TOKEN_URL"] = "https://idp.internal/token"  # 443: allowed
    problems = check_manifests.unreachable_settings(docs)
    assert [p.split(",")[0] for p in problems] == [
        "MAILBUS_KAFKA_BOOTSTRAP names port 9096",
        "MAILBUS_SCHEMA_REGISTRY_URL names port 8081",
    ]
    opened = copy.deepcopy(docs)
    one(opened, "NetworkPolicy", "mailbus-egress")["spec"]["egress"].append(
        {"ports": [{"port": 8081, "protocol": "TCP"}, {"port": 9096, "protocol": "TCP"}]}
    )
    assert check_manifests.unreachable_settings(opened) == []
    # `make validate` runs the rule on every overlay it renders.
    needed = [one(docs, "ConfigMap", "mailbus"), one(docs, "NetworkPolicy", "mailbus-egress")]
    assert any("names port 9096" in p for p in check_manifests.check("prod", needed))
