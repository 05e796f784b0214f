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

from mailbus.kernel.settings import Settings

__all__ = [
    "APACHE_KAFKA_IMAGE",
    "REPO",
    "StackServices",
    "apache_kafka_env",
    "database_url_for",
    "find_services",
    "run_mailbus",
    "settings_env",
    "stack_script",
]

APACHE_KAFKA_IMAGE = "apache/kafka:4.2.0"
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
        # No TLS on loopback unless a URL asks for it (libpq's default, sslmode=prefer, has
        # it on the stack's PostgreSQL): a handshake costs about 4 ms of CPU a connection,
        # and the lanes' CPU-bound run opens some 17,500 of them, in the test processes and
        # the `mailbus` processes they start. test_transport_security.py connects with
        # sslmode=verify-full, which this leaves alone.
        os.environ.setdefault("PGSSLMODE", "disable")
        return StackServices(database_url, bootstrap)
    if _docker_answers():
        return _start_containers(cleanup)
    pytest.fail(_HOW)


def _start_containers(cleanup: ExitStack) -> StackServices:
    from testcontainers.community.postgres import (
        PostgresContainer,
    )
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import (
        LogMessageWaitStrategy,
    )

    postgres = cleanup.enter_context(PostgresContainer("postgres:15", driver=None))
    port = free_port()
    kafka = DockerContainer(APACHE_KAFKA_IMAGE).with_bind_ports(9092, port)
    for name, value in apache_kafka_env("127.0.0.1", port).items():
        kafka.with_env(name, value)
    kafka.waiting_for(LogMessageWaitStrategy("Kafka Server started"))
    cleanup.enter_context(kafka)
    return StackServices(postgres.get_connection_url(), f"127.0.0.1:{port}")


def apache_kafka_env(host: str, port: int) -> dict[str, str]:
    """The official image's settings for one KRaft node reachable at ``host:port`` from
    the tests. testcontainers' KafkaContainer cannot run it (it rejects 4.x in KRaft mode
    and runs Confluent-image scripts), so the generic container gets these instead."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    }


def free_port() -> int:
    # The advertised listener must name the host port before the broker starts, so the
    # port is chosen here rather than by Docker.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    *args: str, env: Mapping[str, str], timeout: float = 60, build: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """``python -m mailbus ARGS`` of the checkout ``build`` (this repository unless told)
    with that checkout's client, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "mailbus", *args],
        cwd=build,
        env={"PYTHONPATH": str(build / "client"), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
