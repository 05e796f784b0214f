"""Where the integration tests find PostgreSQL and Kafka.

Services named by ``MAILBUS_DATABASE_URL`` / ``MAILBUS_KAFKA_BOOTSTRAP`` are used as they
are; where neither is named and a Docker engine answers, testcontainers starts them;
otherwise the tests fail, saying how to start the local stack. Never a silent skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from mailbus.settings import Settings

__all__ = [
    "REPO",
    "StackServices",
    "database_url_for",
    "find_services",
    "run_mailbus",
    "settings_env",
    "stack_script",
]

REPO = Path(__file__).resolve().parent.parent
_HOW = (
    "no PostgreSQL/Kafka for the integration tests: run `make stack-up` and export the "
    "variables of `bash stack/local-stack.sh env` (or use `make test`, which does both)"
)


class StackServices:
    def __init__(self, database_url: str, kafka_bootstrap: str) -> None:
        self.database_url = database_url
        self.kafka_bootstrap = kafka_bootstrap


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return probe.returncode == 0


def _reachable(host_port: str) -> bool:
    host, _, port = host_port.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def find_services(cleanup: ExitStack) -> StackServices:
    database_url = os.environ.get("MAILBUS_DATABASE_URL")
    bootstrap = os.environ.get("MAILBUS_KAFKA_BOOTSTRAP")
    if database_url and bootstrap:
        if not _reachable(bootstrap):
            pytest.fail(f"MAILBUS_KAFKA_BOOTSTRAP={bootstrap} does not answer. {_HOW}")
        return StackServices(database_url, bootstrap)
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer  # type: ignore[import-not-found]
        from testcontainers.community.postgres import (  # type: ignore[import-not-found]
            PostgresContainer,
        )

        postgres = cleanup.enter_context(PostgresContainer("postgres:15"))
        kafka = cleanup.enter_context(KafkaContainer("apache/kafka:4.2.0").with_kraft())
        url = postgres.get_connection_url().replace("+psycopg2", "")
        return StackServices(url, kafka.get_bootstrap_server())
    pytest.fail(_HOW)


def stack_script(*args: str) -> None:
    """Drive the local stack (broker and database restarts in fault tests)."""
    subprocess.run(["bash", str(REPO / "stack" / "local-stack.sh"), *args], check=True, timeout=180)


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment a `mailbus` subprocess needs to see the same services."""
    env = dict(os.environ)
    env.update(
        MAILBUS_DATABASE_URL=settings.database_url,
        MAILBUS_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        MAILBUS_TOPIC_PREFIX=settings.topic_prefix,
        MAILBUS_PARTITIONS=str(settings.partitions),
    )
    env.update(extra)  # may replace any of the above
    return env


def database_url_for(base_url: str, dbname: str) -> str:
    """``base_url`` pointing at another database of the same server."""
    parts = urlsplit(base_url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


def run_mailbus(
    *args: str, env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m mailbus ARGS`` from the repository, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "mailbus", *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
