"""Each Kubernetes overlay's Deployments and its migrate Job start as rendered (issue 35):
with exactly their env (values, ConfigMap and Secret references), the Secret keys their
volumes mount at their paths, and their args, against the local stack, each reaching its
readiness probe (the Job, its exit 0). A variable that names a file the pod does not
mount, or a key its Secret is not documented to hold, fails here.

Mapped, and only that: the Secrets' values (made outside the repository, k8s/base/
kustomization.yaml) are the local stack's (the login roles of ops/compose/login-roles.sql);
the cluster's hosts are the local stack's and a sandbox of the test's own; the mounts are
temporary directories; each container port a free local one; on the shared single broker
the topics get a prefix of their own and a replication factor of 1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from e2e_stack import API_KEY
from k8s_render import kustomize_command, render
from services import REPO, StackServices, database_url_for

from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import load_settings
from mailbus.kernel.topics import create_topics
from mailbus.sandbox.server import ThreadedSandbox, start_in_thread

pytestmark = pytest.mark.stack

OVERLAYS = sorted(p.name for p in (REPO / "k8s/overlays").iterdir() if p.is_dir())
# the workloads whose database URL is a Secret of its own, each with a local login
# (ops/compose/login-roles.sql: mailbus_<workload>_local, password <workload>-local)
_WORKLOADS = frozenset({"relay", "consumer", "intake", "webhooks", "operator", "console"})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _secret_value(name: str, key: str, owner_url: str, sandbox_key: str) -> str:
    """The local stand-in of Secret ``name``'s ``key``; a key not documented fails."""
    url = urlsplit(owner_url)
    if key == "database-url" and name == "mailbus-db-owner":
        return owner_url
    role = name.removeprefix("mailbus-db-")
    if key == "database-url" and role in _WORKLOADS:
        return f"postgresql://mailbus_{role}_local:{role}-local@{url.hostname}:{url.port}{url.path}"
    local = {
        "provider-api-key": sandbox_key,
        "webhook-secret": "k8s-test-secret",
        "console-users": "ana:operator:-\n",
    }
    assert name == "mailbus" and key in local, f"Secret {name} key {key}: not documented"
    return local[key]


@pytest.fixture
def cluster(
    services: StackServices, topic_prefixes: list[str]
) -> Iterator[tuple[str, str, ThreadedSandbox]]:
    name = f"mailbus_k8s_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url_for(services.database_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((REPO / "ops/compose/login-roles.sql").read_text().encode())
    prefix = f"k8s-{uuid.uuid4().hex[:8]}"
    topic_prefixes.append(prefix)
    create_topics(
        load_settings({"MAILBUS_KAFKA_BOOTSTRAP": services.kafka_bootstrap}),
        [f"{prefix}.orders.events"],
    )
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1)
    yield url, prefix, sandbox
    sandbox.stop()
    drop_database(services.database_url, name)


class _Pod:
    def __init__(self, doc: dict[str, Any], root: Path, maps: dict[str, dict[str, str]]) -> None:
        self.name = doc["metadata"]["name"]
        self.job = doc["kind"] == "Job"
        self.pod = doc["spec"]["template"]["spec"]
        self.container = self.pod["containers"][0]
        self.root = root / self.name
        self.maps = maps
        self.ports = {
            str(p["containerPort"]): _free_port() for p in self.container.get("ports", [])
        }
        self.ports.setdefault("9100", _free_port())

    def mounts(self, secret: Any) -> dict[str, Path]:
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        found = {}
        for mount in self.container.get("volumeMounts", []):
            local = self.root / mount["mountPath"].lstrip("/")
            local.mkdir(parents=True, exist_ok=True)
            found[mount["mountPath"]] = local
            volume = volumes[mount["name"]]
            sources = (
                [volume["secret"] | {"name": volume["secret"]["secretName"]}]
                if "secret" in volume
                else [
                    s["secret"]
                    for s in volume.get("projected", {}).get("sources", [])
                    if "secret" in s
                ]
            )
            for source in sources:
                for item in source.get("items") or []:
                    (local / item["path"]).write_text(secret(source["name"], item["key"]))
        return found

    def env(self, mounts: dict[str, Path], secret: Any, localize: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for ref in self.container.get("envFrom", []):
            env.update(self.maps[ref["configMapRef"]["name"]])
        for var in self.container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "configMapKeyRef" in var["valueFrom"]:
                ref = var["valueFrom"]["configMapKeyRef"]
                env[var["name"]] = self.maps[ref["name"]][ref["key"]]
            elif "secretKeyRef" in var["valueFrom"]:
                ref = var["valueFrom"]["secretKeyRef"]
                env[var["name"]] = secret(ref["name"], ref["key"])
        env = {k: localize(self, v) for k, v in env.items()}
        return {k: _mapped(v, mounts) for k, v in env.items()}


def _mapped(value: str, mounts: dict[str, Path]) -> str:
    """``value`` with the longest mount path it starts with replaced by the local one."""
    for target, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if value == target or value.startswith(target + "/"):
            return str(local) + value[len(target) :]
    return value


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_workload_of_the_overlay_starts_as_rendered(
    overlay: str, cluster: tuple[str, str, ThreadedSandbox], services: StackServices, tmp_path: Path
) -> None:
    owner_url, prefix, sandbox = cluster
    docs = render(kustomize_command(), f"k8s/overlays/{overlay}")
    maps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    pods = [
        _Pod(d, tmp_path, maps)
        for d in docs
        if d["kind"] in ("Deployment", "Job")
        and "mailbus" in d["spec"]["template"]["spec"]["containers"][0]["image"]
        and d["metadata"]["name"] != "mailbus-sandbox"  # the test's own sandbox stands in
    ]

    def secret(name: str, key: str) -> str:
        return _secret_value(name, key, owner_url, API_KEY)

    def localize(pod: _Pod, value: str) -> str:
        if value.startswith("0.0.0.0:"):
            return f"127.0.0.1:{pod.ports.setdefault(value.split(':')[1], _free_port())}"
        return value

    overrides = {
        "MAILBUS_KAFKA_BOOTSTRAP": services.kafka_bootstrap,
        "MAILBUS_PROVIDER_URL": sandbox.url,
        "MAILBUS_METRICS_ADDR": "127.0.0.1",
        "MAILBUS_REPLICATION_FACTOR": "1",
        "MAILBUS_TOPIC_PREFIX": prefix,
        "MAILBUS_INTAKE_TOPIC": f"{prefix}.orders.events",
    }
    running: dict[str, tuple[_Pod, subprocess.Popen[bytes]]] = {}

    def start(pod: _Pod) -> None:
        mounts = pod.mounts(secret)
        env = pod.env(mounts, secret, localize)
        env.update(
            {k: v for k, v in overrides.items() if k in env or k.endswith(("PREFIX", "TOPIC"))}
        )
        env["MAILBUS_METRICS_PORT"] = (
            str(pod.ports["9100"]) if "MAILBUS_METRICS_PORT" in env else ""
        )
        env = {k: v for k, v in env.items() if v}
        env["PATH"] = os.environ["PATH"]
        args = [str(pod.ports.get(a, a)) if a.isdigit() else a for a in pod.container["args"]]
        log = (tmp_path / f"{pod.name}.log").open("wb")
        running[pod.name] = (
            pod,
            subprocess.Popen(
                [sys.executable, "-m", "mailbus", *args],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            ),
        )
        log.close()

    def ready(pod: _Pod, process: subprocess.Popen[bytes]) -> bool:
        code = process.poll()
        if pod.job:
            assert code in (None, 0), (
                f"{pod.name} exited {code}: " + (tmp_path / f"{pod.name}.log").read_text()[-1500:]
            )
            return code == 0
        assert code is None, (
            f"{pod.name} exited {code}: " + (tmp_path / f"{pod.name}.log").read_text()[-1500:]
        )
        probe = pod.container["readinessProbe"]["httpGet"]
        port = {p["name"]: str(p["containerPort"]) for p in pod.container["ports"]}.get(
            probe["port"], str(probe["port"])
        )
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{pod.ports[port]}{probe['path']}", timeout=5
            ) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def wait(group: list[_Pod]) -> None:
        deadline = time.monotonic() + 60
        left = [p.name for p in group]
        while left:
            left = [n for n in left if not ready(*running[n])]
            assert time.monotonic() < deadline, f"not ready in 60 s: {left}"
            time.sleep(0.3)

    try:
        jobs = [p for p in pods if p.job]
        for pod in jobs:
            start(pod)
        wait(jobs)
        rest = [p for p in pods if not p.job]
        for pod in rest:
            start(pod)
        wait(rest)
    finally:
        for _, process in running.values():
            if process.poll() is None:
                process.terminate()
        for _, process in running.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
