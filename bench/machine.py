"""What the benchmarks ran on: CPU, cores, memory, kernel, and the versions measured."""

from __future__ import annotations

import os
import platform
import re
from importlib import metadata
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent


def _pom_property(pom: Path, name: str) -> str:
    match = re.search(rf"<{name}>([^<]+)</{name}>", pom.read_text())
    return match.group(1) if match else "?"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _memory_gib() -> str:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    return "?"


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": _memory_gib(),
        "kernel": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "PostgreSQL": row[0] if row else "?",
        "Kafka": _pom_property(REPO / "stack/kafka/pom.xml", "kafka.version")
        + " (KRaft, single node, stack/kafka/pom.xml)",
        "Debezium": _pom_property(REPO / "bench/peers/debezium/pom.xml", "debezium.version"),
        "PgQueuer": _package("pgqueuer"),
    }
