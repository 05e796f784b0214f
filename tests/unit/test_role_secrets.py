"""Least privilege, wired (issue 22 item 5): every workload of every rendered overlay, and
every compose service, mounts the database URL of its own role and no other."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from k8s_render import kustomize_command, render

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(path.name for path in (REPO / "k8s/overlays").iterdir() if path.is_dir())
# The Secret holding each component's database URL (k8s/base/kustomization.yaml).
ROLE_SECRET = {
    "migrate": "mailbus-db-owner",
    "relay": "mailbus-db-relay",
    "consumer-p0": "mailbus-db-consumer",
    "consumer-p1": "mailbus-db-consumer",
    "consumer-p2": "mailbus-db-consumer",
    "intake": "mailbus-db-intake",
    "webhooks": "mailbus-db-webhooks",
    "console": "mailbus-db-console",
    "retention": "mailbus-db-retention",
}
# The group role each compose service's login role belongs to (ops/compose/login-roles.sql).
COMPOSE_ROLE = {
    "relay": "mailbus_relay",
    "consumer-p0": "mailbus_consumer",
    "consumer-p1": "mailbus_consumer",
    "consumer-p2": "mailbus_consumer",
    "intake": "mailbus_intake",
    "webhooks": "mailbus_webhooks",
    "console": "mailbus_console",
    "retention": "mailbus_retention",
}


@pytest.fixture(scope="module")
def kustomize() -> list[str]:
    return kustomize_command()


def mounted_database_urls(pod: dict[str, Any]) -> list[str]:
    """The Secrets whose key ``database-url`` a pod mounts, as secret or projected volumes."""
    sources: list[dict[str, Any]] = []
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            secret = volume["secret"]
            sources.append({"name": secret["secretName"], "items": secret.get("items")})
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                sources.append(source["secret"])
    found = []
    for source in sources:
        items = source.get("items")
        assert items, f"{source['name']}: a Secret mounted whole (name its keys)"
        found += [source["name"] for item in items if item["key"] == "database-url"]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_workload_mounts_only_its_roles_database_url(
    kustomize: list[str], overlay: str
) -> None:
    seen = {}
    for doc in render(kustomize, f"k8s/overlays/{overlay}"):
        if doc["kind"] not in ("Deployment", "Job", "StatefulSet", "DaemonSet", "CronJob"):
            continue
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        spec = doc["spec"].get("jobTemplate", {}).get("spec", doc["spec"])  # a CronJob's Job
        pod = spec["template"]["spec"]
        seen[component] = mounted_database_urls(pod)
        env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
        if seen[component]:
            assert env["MAILBUS_DATABASE_URL_FILE"] == "/run/secrets/mailbus/database-url"
    expected = {name: [secret] for name, secret in ROLE_SECRET.items()}
    assert {name: urls for name, urls in seen.items() if name in expected} == expected
    assert all(not urls for name, urls in seen.items() if name not in expected), seen


def test_each_compose_service_logs_in_as_its_own_role() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    files = {name: secret["file"] for name, secret in compose["secrets"].items()}
    roles = (REPO / "ops/compose/login-roles.sql").read_text()
    users = {}
    for name, service in compose["services"].items():
        mounted = [
            s["source"] for s in service.get("secrets", [])
            if isinstance(s, dict) and s.get("target") == "database_url"
        ] + [s for s in service.get("secrets", []) if s == "database_url"]  # fmt: skip
        if name in COMPOSE_ROLE or mounted:
            [secret] = mounted
            url = (REPO / files[secret]).read_text().strip()
            users[name] = urlsplit(url).username
    assert users.pop("migrate") == "mailbus"  # the owner: migrations and --roles
    assert set(users) == set(COMPOSE_ROLE)
    for name, user in users.items():
        group = COMPOSE_ROLE[name]
        assert user == f"{group}_local", (name, user)
        assert f"'{group.removeprefix('mailbus_')}'" in roles  # made a member of its group
    assert len({users[n] for n in ("relay", "intake", "webhooks", "consumer-p0")}) == 4
