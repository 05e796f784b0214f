"""What Debezium's outbox router needs and the shared stack lacks, started and stopped here:
a PostgreSQL cluster of its own with wal_level=logical (port 5433; the shared cluster on
5432 is never restarted) and Kafka Connect standalone with the connector's jars (Maven
Central, via bench/peers/debezium/pom.xml, cached per pom content). Runs as root."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent / "debezium"
CACHE = Path(os.environ.get("MAILBUS_CACHE_DIR", Path.home() / ".cache/mailbus"))
WORK = Path("/tmp/mailbus-debezium-bench")
CLUSTER, PORT, CONNECT_PORT = "mailbus_dbz", 5433, 18083
USER = PASSWORD = "dbz"
DATABASE = "outbox"
URL = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{PORT}/{DATABASE}"
OUTBOX = """CREATE TABLE outbox (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype text NOT NULL,
    aggregateid text NOT NULL,
    type text NOT NULL DEFAULT 'email_send',
    payload text NOT NULL
)"""


def jars() -> Path:
    """The flat jar directory, fetched once per pom content."""
    pom = HERE / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    libs = CACHE / f"debezium-{digest}" / "libs"
    if not libs.is_dir():
        tmp = libs.with_name("libs.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             f"-Ddbz.libs.dir={tmp}"], check=True,
        )  # fmt: skip
        tmp.rename(libs)
    return libs


def _pg_version() -> str:
    return sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(x) for x in v.split(".")])[
        -1
    ]


def _psql(version: str, sql: str) -> None:
    subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-p", str(PORT),
         "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True, cwd="/",
    )  # fmt: skip


@contextmanager
def cluster() -> Iterator[str]:
    """A fresh logical-replication cluster, dropped on exit; yields its URL for USER."""
    version = _pg_version()
    subprocess.run(["pg_dropcluster", "--stop", version, CLUSTER], capture_output=True)
    subprocess.run(
        ["pg_createcluster", version, CLUSTER, "--port", str(PORT),
         "-o", "wal_level=logical", "-o", "max_replication_slots=4", "-o", "max_wal_senders=4"],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        subprocess.run(["pg_ctlcluster", version, CLUSTER, "start"], check=True)
        _psql(version, f"CREATE ROLE {USER} LOGIN REPLICATION PASSWORD '{PASSWORD}'")
        _psql(version, f"CREATE DATABASE {DATABASE} OWNER {USER}")
        with psycopg.connect(URL) as conn:
            conn.execute(OUTBOX)  # owned by USER, so it may create the filtered publication
        yield URL
    finally:
        subprocess.run(["pg_dropcluster", "--stop", version, CLUSTER], check=False)


def _properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def connector_config(prefix: str) -> dict[str, str]:
    return {
        "name": "mailbus-outbox-bench",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(PORT),
        "database.user": USER,
        "database.password": PASSWORD,
        "database.dbname": DATABASE,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": "mailbus_bench",
        "publication.name": "mailbus_bench",
        "publication.autocreate.mode": "filtered",
        "table.include.list": "public.outbox",
        "snapshot.mode": "no_data",
        "transforms": "outbox",
        "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
        "transforms.outbox.route.topic.replacement": f"{prefix}." + "${routedByValue}",
    }


@contextmanager
def connect(prefix: str, bootstrap: str = "127.0.0.1:9092") -> Iterator[Path]:
    """Kafka Connect standalone running the outbox connector; yields its log file."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    log = WORK / "connect.log"
    log4j = _properties(WORK / "log4j2.properties", {
        "appender.file.type": "File", "appender.file.name": "file",
        "appender.file.fileName": str(log), "appender.file.layout.type": "PatternLayout",
        "appender.file.layout.pattern": "%d %p %c{1} - %m%n",
        "rootLogger.level": "INFO", "rootLogger.appenderRef.file.ref": "file",
    })  # fmt: skip
    worker = _properties(WORK / "worker.properties", {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "offset.storage.file.filename": str(WORK / "offsets"),
        "offset.flush.interval.ms": "1000",
        "listeners": f"http://127.0.0.1:{CONNECT_PORT}",
    })  # fmt: skip
    connector = _properties(WORK / "connector.properties", connector_config(prefix))
    process = subprocess.Popen(
        ["java", "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={log4j}",
         "-cp", f"{jars()}/*", "org.apache.kafka.connect.cli.ConnectStandalone",
         str(worker), str(connector)],
        stdout=subprocess.DEVNULL, stderr=open(WORK / "connect.err", "w"),  # noqa: SIM115
    )  # fmt: skip
    try:
        yield log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wait_streaming(url: str, log: Path, timeout: float = 240) -> None:
    """Until the connector holds its replication slot (Connect up, connector streaming)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = 'mailbus_bench'"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(1)
    raise TimeoutError(f"Debezium never streamed; errors: {errors(log)}")


def errors(log: Path) -> str:
    """The Connect log's ERROR lines (the last few), for a failure message."""
    if not log.exists():
        return "no Connect log"
    lines = [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line]
    return " | ".join(lines[-3:]) or "none logged"
