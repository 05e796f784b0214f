"""`docker compose up` without a Docker engine (issue 35, review 2026-12-06 hole 7): every
mailbus service of docker-compose.yml starts with exactly its own environment and files
and reaches its healthcheck (a one-shot service, its exit 0), so a variable that names a
file the service does not mount, or a missing variable, fails here.

What is mapped, and only that: the secrets are materialised at their targets and the
volumes are directories, under a temporary root per service (paths in the environment
and commands follow); the compose hosts ``postgres``, ``kafka`` and ``sandbox`` become the
local stack's (and a database of this test's own, prepared as the postgres image's
init scripts would); each container port becomes a free local one. On the shared broker
the topics get a prefix of their own (``MAILBUS_TOPIC_PREFIX``, ``MAILBUS_INTAKE_TOPIC``:
the only variables added). Nothing of the test's own environment is inherited.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml
from services import REPO, StackServices, database_url_for

from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import load_settings
from mailbus.kernel.topics import create_topics

pytestmark = pytest.mark.stack

COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
OURS = {  # the image's default target, and its sandbox target
    n: s
    for n, s in COMPOSE["services"].items()
    if str(s.get("image", "")).startswith(("mailbus:", "mailbus-sandbox:"))
}
ONE_SHOT = {n for n, s in OURS.items() if "healthcheck" not in s}
# a scheduled job (retention, labelled so): healthy once a pass ended with exit 0
LOOPS = {n for n in ONE_SHOT if "io.mailbus.schedule" in OURS[n].get("labels", {})}
_PORTS = {"8025", "8026", "8027", "9100"}  # the container ports our services listen on


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Machine:
    """The local stand-ins of compose's hosts, ports and mounts."""

    root: Path
    database_url: str  # the owner's URL of this test's database
    kafka: str
    prefix: str
    ports: dict[str, dict[str, int]] = field(default_factory=dict)  # service -> port -> local

    def port(self, service: str, port: str) -> int:
        owner = "sandbox" if port == "8025" else service  # the sandbox is reached by others
        return self.ports.setdefault(owner, {}).setdefault(port, _free_port())

    def mounts(self, name: str) -> dict[str, Path]:
        """Container path -> local path of one service's secrets and volumes."""
        service, found = OURS[name], {}
        for secret in service.get("secrets", []):
            source, target = (
                (secret, secret)
                if isinstance(secret, str)
                else (secret["source"], secret.get("target", secret["source"]))
            )
            target = target if target.startswith("/") else f"/run/secrets/{target}"
            local = self.root / name / target.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            text = (REPO / COMPOSE["secrets"][source]["file"]).read_text()
            local.write_text(self.localize(name, text))
            found[target] = local
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            local = self.root / "volumes" / source
            local.mkdir(parents=True, exist_ok=True)
            found[target] = local
        return found

    def localize(self, name: str, text: str, mounts: dict[str, Path] | None = None) -> str:
        ours = urlsplit(self.database_url)
        text = re.sub(r"@postgres:5432/mailbus\b", f"@{ours.hostname}:{ours.port}{ours.path}", text)
        text = text.replace("kafka:29092", self.kafka)
        text = text.replace("http://sandbox:8025", f"http://127.0.0.1:{self.port(name, '8025')}")
        text = "127.0.0.1" if text == "0.0.0.0" else text  # MAILBUS_METRICS_ADDR
        text = re.sub(r"\b0\.0\.0\.0:(\d+)", lambda m: f"127.0.0.1:{self.port(name, m[1])}", text)
        text = re.sub(
            r"127\.0\.0\.1:(\d+)\b",
            lambda m: f"127.0.0.1:{self.port(name, m[1])}" if m[1] in _PORTS else m[0],
            text,
        )
        for target, local in sorted((mounts or {}).items(), key=lambda m: -len(m[0])):
            text = text.replace(target, str(local))
        return text


def _env(machine: Machine, name: str, mounts: dict[str, Path]) -> dict[str, str]:
    service = OURS[name]
    env = {
        key: machine.localize(name, str(value), mounts)
        for key, value in (service.get("environment") or {}).items()
    }
    if env.get("MAILBUS_METRICS_PORT") in _PORTS:
        env["MAILBUS_METRICS_PORT"] = str(machine.port(name, env["MAILBUS_METRICS_PORT"]))
    env["MAILBUS_TOPIC_PREFIX"] = machine.prefix
    env["MAILBUS_INTAKE_TOPIC"] = f"{machine.prefix}.orders.events"
    env["PATH"] = f"{machine.root / 'bin'}:{os.environ['PATH']}"
    return env


def _command(machine: Machine, name: str, mounts: dict[str, Path]) -> list[str]:
    service = OURS[name]
    entrypoint = service.get("entrypoint", ["mailbus"])
    args = [machine.localize(name, a.replace("$$", "$"), mounts) for a in service["command"]]
    args = [str(machine.port(name, a)) if a in _PORTS else a for a in args]
    if entrypoint == ["mailbus"]:
        return [sys.executable, "-m", "mailbus", *args]
    return [*entrypoint, *args]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@pytest.fixture
def machine(
    services: StackServices, tmp_path: Path, topic_prefixes: list[str]
) -> Iterator[Machine]:
    name = f"mailbus_compose_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url_for(services.database_url, name)
    prefix = f"compose-{uuid.uuid4().hex[:8]}"
    topic_prefixes.append(prefix)
    bin_dir = tmp_path / "bin"  # the image's `mailbus` and `python`
    bin_dir.mkdir()
    for tool, line in (
        ("mailbus", f'exec {sys.executable} -m mailbus "$@"'),
        ("python", f'exec {sys.executable} "$@"'),
    ):
        (bin_dir / tool).write_text(f"#!/bin/sh\ncd {REPO}\n{line}\n")
        (bin_dir / tool).chmod(0o755)
    # what the postgres image runs on a fresh volume: its init scripts, as the owner
    with psycopg.connect(url, autocommit=True) as conn:
        for volume in COMPOSE["services"]["postgres"].get("volumes", []):
            source, target = volume.split(":")[:2]
            if target.startswith("/docker-entrypoint-initdb.d/"):
                conn.execute((REPO / source).read_text().encode())
    create_topics(
        load_settings({"MAILBUS_KAFKA_BOOTSTRAP": services.kafka_bootstrap}),
        [f"{prefix}.orders.events"],
    )
    yield Machine(tmp_path, url, services.kafka_bootstrap, prefix)
    drop_database(services.database_url, name)


def test_every_compose_service_starts_with_its_own_environment_and_files(
    machine: Machine, tmp_path: Path
) -> None:
    running: dict[str, subprocess.Popen[bytes]] = {}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str) -> None:
        mounts = machine.mounts(name)
        with (logs / f"{name}.log").open("wb") as log:
            running[name] = subprocess.Popen(
                _command(machine, name, mounts),
                cwd=REPO,  # this checkout's mailbus
                env=_env(machine, name, mounts),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def healthy(name: str) -> bool:
        process = running[name]
        if name in LOOPS:
            return "exit 0" in (logs / f"{name}.log").read_text()
        if name in ONE_SHOT:
            return process.poll() == 0
        assert process.poll() is None, (
            f"{name} exited {process.returncode}: " + (logs / f"{name}.log").read_text()[-1500:]
        )
        test = " ".join(OURS[name]["healthcheck"]["test"])
        [url] = re.findall(r"http://127\.0\.0\.1:\d+/[\w/]+", machine.localize(name, test))
        return _ready(url)

    def wait(names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        left = list(names)
        while left:
            for name in list(left):
                process = running[name]
                if name in ONE_SHOT and process.poll() not in (None, 0):
                    raise AssertionError(
                        f"{name} exited {process.returncode}: "
                        + (logs / f"{name}.log").read_text()[-1500:]
                    )
                if healthy(name):
                    left.remove(name)
            assert time.monotonic() < deadline, f"not healthy in {timeout} s: {left}"
            time.sleep(0.3)

    try:
        first = [n for n, s in OURS.items() if not set(s.get("depends_on", {})) & set(OURS)]
        for name in first:
            start(name)
        wait(first, 60)
        rest = [n for n in OURS if n not in first]
        for name in rest:
            start(name)
        wait(rest, 60)
        users = (machine.root / "volumes" / "console-users" / "console-users").read_text()
        assert users.startswith("admin:operator:$argon2id$")  # made here, not shipped
        assert "sign in as admin with the password" in (logs / "console-users.log").read_text()
    finally:
        for process in running.values():
            if process.poll() is None:
                process.terminate()
        for process in running.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        shutil.rmtree(machine.root / "volumes", ignore_errors=True)
