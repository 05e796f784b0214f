"""Every long-running process, started the way the manifests start it, answers every probe
the manifests name with 200.

The commands, probe paths and ports are read from k8s/base (each Deployment's args, the
probes of pod-defaults.yaml and of the Deployment itself) and docker-compose.yml (each
service's command and healthcheck URL), not written here: a new process or probe is
checked without touching this test. The manifests' ports are their MAILBUS_METRICS_PORT
and MAILBUS_WEBHOOK_LISTEN; each run gets free local ports in their place.
"""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_stack import Stack
from relay_runner import wait_until

from mailbus.kernel.topics import create_topics

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
_URL = re.compile(r"https?://[^/'\" ]+:(\d+)(/[^'\" ]*)")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _k8s() -> tuple[set[tuple[str, ...]], set[tuple[int, str]], dict[str, int]]:
    """Commands of the Deployments, their probes (port, path), the ports by env name."""
    base = REPO / "k8s/base"
    [config] = _documents(base / "configmap.yaml")
    ports = {
        "MAILBUS_METRICS_PORT": int(config["data"]["MAILBUS_METRICS_PORT"]),
        "MAILBUS_WEBHOOK_LISTEN": int(config["data"]["MAILBUS_WEBHOOK_LISTEN"].rsplit(":")[-1]),
    }
    [defaults] = _documents(base / "pod-defaults.yaml")
    commands: set[tuple[str, ...]] = set()
    probes: set[tuple[int, str]] = set()
    containers = [defaults["spec"]["template"]["spec"]["containers"][0]]
    for path in sorted(base.glob("*.yaml")):
        for doc in _documents(path):
            if doc.get("kind") == "Deployment" and path.name != "pod-defaults.yaml":
                [container] = doc["spec"]["template"]["spec"]["containers"]
                commands.add(tuple(container["args"]))
                containers.append(container)
    named = {port["name"]: port["containerPort"] for c in containers for port in c.get("ports", [])}
    for container in containers:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            http = container.get(kind, {}).get("httpGet")
            if http is not None:
                port = http["port"]
                probes.add((named[port] if isinstance(port, str) else int(port), http["path"]))
    return commands, probes, ports


def _compose() -> tuple[set[tuple[str, ...]], set[tuple[int, str]], dict[str, int]]:
    """The mailbus services' commands and healthcheck URLs, the ports by env name."""
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    commands: set[tuple[str, ...]] = set()
    probes: set[tuple[int, str]] = set()
    ports: dict[str, int] = {}
    for service in services.values():
        environment = service.get("environment", {})
        if "MAILBUS_METRICS_PORT" not in environment:
            continue  # not a long-running mailbus process (migrate, the sandbox, …)
        ports["MAILBUS_METRICS_PORT"] = int(environment["MAILBUS_METRICS_PORT"])
        if "MAILBUS_WEBHOOK_LISTEN" in environment:
            listen = environment["MAILBUS_WEBHOOK_LISTEN"]
            ports["MAILBUS_WEBHOOK_LISTEN"] = int(listen.rsplit(":")[-1])
        commands.add(tuple(service["command"]))
        for port, path in _URL.findall(" ".join(service["healthcheck"]["test"])):
            probes.add((int(port), path))
    return commands, probes, ports


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_the_manifests_name_the_same_processes_and_probes() -> None:
    k8s_commands, k8s_probes, k8s_ports = _k8s()
    compose_commands, compose_probes, compose_ports = _compose()
    assert k8s_commands == compose_commands
    assert {"relay", "consume", "intake", "webhooks"} <= {c[0] for c in k8s_commands}
    assert k8s_probes and compose_probes
    assert k8s_ports == compose_ports


def test_every_process_answers_every_probe_of_the_manifests(stack: Stack, tmp_path: Path) -> None:
    users = tmp_path / "console-users"  # compose makes its own at first start
    users.write_text("ana:operator:-\n")
    k8s_commands, k8s_probes, k8s_ports = _k8s()
    compose_commands, compose_probes, compose_ports = _compose()
    topic = f"{stack.settings.topic_prefix}.orders.events"
    create_topics(stack.settings, [topic])
    running: dict[tuple[str, ...], dict[int, int]] = {}  # command -> manifest port -> local
    for command in sorted(k8s_commands | compose_commands):
        local = {"MAILBUS_METRICS_PORT": _free_port(), "MAILBUS_WEBHOOK_LISTEN": _free_port()}
        stack.start(
            "-".join(command).replace("--", ""),
            *command,
            MAILBUS_METRICS_PORT=str(local["MAILBUS_METRICS_PORT"]),
            MAILBUS_WEBHOOK_LISTEN=f"127.0.0.1:{local['MAILBUS_WEBHOOK_LISTEN']}",
            MAILBUS_WEBHOOK_SECRET="probe-test-secret",
            MAILBUS_INTAKE_TOPIC=topic,
            MAILBUS_CONSOLE_LISTEN=f"127.0.0.1:{_free_port()}",
            MAILBUS_CONSOLE_USERS_FILE=str(users),
        )
        running[command] = {
            manifest[name]: local[name]
            for manifest in (k8s_ports, compose_ports)
            for name in manifest
        }
    probes = k8s_probes | compose_probes
    failing: dict[str, int] = {}

    def all_answer() -> bool:
        failing.clear()
        for command, ports in running.items():
            for port, path in sorted(probes):
                assert port in ports, f"a probe names port {port}, not a mailbus setting's"
                code = _answers(f"http://127.0.0.1:{ports[port]}{path}")
                if code != 200:
                    failing[f"{' '.join(command)} :{port}{path}"] = code
        return not failing

    try:
        wait_until(all_answer, 90, "every probe answering 200")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: not 200: {failing}") from None
    for name in list(stack.processes):
        assert stack.terminate(name) == 0, name
