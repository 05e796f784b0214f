"""Shared plumbing of the benchmarks: a fresh database and topics, real processes."""

from __future__ import annotations

import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic
from psycopg.conninfo import conninfo_to_dict, make_conninfo

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402
from mailbus.kernel.settings import Settings  # noqa: E402

__all__ = [
    "REPO",
    "Bench",
    "CpuSampler",
    "cpu_between",
    "database_transactions",
    "free_port",
    "machine_busy",
    "middle_80",
    "named_cpu",
    "own_cpu",
    "percentile",
    "processes_cpu",
    "serving",
    "statement_counts",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    args: list[str],
    probe: str,
    env: Mapping[str, str] | None = None,
    listen_variable: str | None = None,
) -> Iterator[str]:
    """A server process (``python -m ...`` from this checkout) on a free port, from the
    moment ``probe`` answers; its base URL. The port is appended to ``args``, or, with
    ``listen_variable``, given as ``127.0.0.1:PORT`` in that variable of ``env``."""
    port = free_port()
    environment = dict(os.environ if env is None else env)
    if listen_variable is None:
        args = [*args, str(port)]
    else:
        environment[listen_variable] = f"127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + probe, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{args[0]} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


class CpuSampler(threading.Thread):
    """CPU seconds used so far by named groups, each read by its own function, sampled
    every ``interval`` s (from /proc, no database work, so the measured processes are not
    slowed by it), as (time, {group: CPU s})."""

    def __init__(self, groups: Mapping[str, Callable[[], float]], interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._groups = groups
        self._interval = interval
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            cpu = {name: read() for name, read in self._groups.items()}
            self.samples.append((time.time(), cpu))
            self._done.wait(self._interval)

    def stop(self) -> list[tuple[float, dict[str, float]]]:
        self._done.set()
        self.join()
        return self.samples


def cpu_between(
    samples: list[tuple[float, dict[str, float]]], start: float, end: float
) -> dict[str, float]:
    """Each group's CPU seconds between the wall-clock times ``start`` and ``end``, from the
    samples nearest each (a window inside the samples)."""

    def at(moment: float) -> dict[str, float]:
        return min(samples, key=lambda sample: abs(sample[0] - moment))[1]

    before, after = at(start), at(end)
    return {name: after[name] - before[name] for name in after}


def processes_cpu(processes: Sequence[subprocess.Popen[bytes]]) -> Callable[[], float]:
    """Reads the CPU seconds ``processes`` have used so far."""
    return lambda: sum(_pid_cpu(process.pid) for process in processes)


def named_cpu(command: str, argument: str | None = None) -> Callable[[], float]:
    """Reads the CPU seconds used so far by every running process whose command name
    (/proc/PID/comm) is ``command``, e.g. "postgres", and whose command line contains
    ``argument`` if given (``"java", "kafka.Kafka"``: the broker, not the registry). A
    process that exits between two reads takes its CPU with it: for long-lived ones."""

    def read() -> float:
        total = 0.0
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if (proc / "comm").read_text().strip() != command:
                    continue
                if (
                    argument is not None
                    and argument.encode() not in (proc / "cmdline").read_bytes()
                ):
                    continue
                total += _pid_cpu(int(proc.name))
            except (FileNotFoundError, ProcessLookupError):
                pass  # exited while we looked
        return total

    return read


def own_cpu() -> float:
    """CPU seconds this benchmark process has used so far (every thread)."""
    return _pid_cpu(os.getpid())


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent busy so far (/proc/stat: all but
    idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _pid_cpu(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_transactions(url: str) -> int:
    """Transactions committed or rolled back so far in the database at ``url``, by every
    process (pg_stat_database; statements: :func:`statement_counts`). A backend reports
    its counts within a second, and at its exit: this waits 1.5 s first."""
    time.sleep(1.5)
    with psycopg.connect(url) as conn:
        [(count,)] = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchall()
    return int(count)


def statement_counts(url: str) -> tuple[Counter[str], Counter[str]] | None:
    """Statements run so far in the database at ``url``, by every process, and their
    execution time in ms, each keyed by the statement's first line (a query file's leading
    comment, or the SQL itself), from pg_stat_statements: ``stack/local-stack.sh`` loads
    it and creates its view in the ``postgres`` database, where this reads it. None where
    it is not loaded."""
    target = conninfo_to_dict(url)
    try:
        with psycopg.connect(make_conninfo(url, dbname="postgres")) as conn:
            rows = conn.execute(
                "SELECT split_part(ltrim(s.query), chr(10), 1), sum(s.calls),"
                " sum(s.total_exec_time)"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = %s GROUP BY 1",
                (target["dbname"],),
            ).fetchall()
    except psycopg.Error:
        return None
    calls = Counter({str(first): int(n) for first, n, _ in rows})
    exec_ms = Counter({str(first): float(ms) for first, _, ms in rows})
    return calls, exec_ms


def middle_80(completion_times: Sequence[float]) -> float:
    """Completions a second between the 10th and the 90th percentile completion (the
    discrete percentiles, as the delivery benchmark takes them over ``accepted_at``).

    Start-up (connections opening, the first fetch) and the drain tail (the last jobs
    finishing with fewer in flight, then the idle wait before the run ends) are left out:
    the rate is the steady one, comparable between runs and between systems."""
    times = sorted(completion_times)
    first, last = math.ceil(len(times) / 10) - 1, math.ceil(9 * len(times) / 10) - 1
    if last <= first or times[last] == times[first]:
        raise ValueError(f"{len(times)} completion(s): too few to take a rate from")
    return (last - first) / (times[last] - times[first])


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class Bench:
    """A database and topics of their own, and the processes started against them."""

    def __init__(self, base: Settings, topic_config: dict[str, str] | None = None) -> None:
        self.dbname = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
        self._admin_url = base.database_url
        with psycopg.connect(base.database_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.dbname}"')
        url = base.database_url.rsplit("/", 1)[0] + f"/{self.dbname}"
        apply_migrations(url)
        self.settings = replace(
            base, database_url=url, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}"
        )
        topics = [self.settings.topic(p) for p in ("p0", "p1", "p2")]
        topics += [self.settings.dlq_topic, self.settings.events_topic]
        admin_client = AdminClient({"bootstrap.servers": base.kafka_bootstrap})
        new = [NewTopic(t, base.partitions, 1, config=topic_config or {}) for t in topics]
        for future in admin_client.create_topics(new).values():
            future.result(30)
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "MAILBUS_DATABASE_URL": self.settings.database_url,
            "MAILBUS_TOPIC_PREFIX": self.settings.topic_prefix,
            "MAILBUS_LOG_LEVEL": "WARNING",
            **extra,
        }

    def start(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [sys.executable, "-m", "mailbus", *args],
            cwd=REPO,
            env=self.env(**env),
            stdout=subprocess.DEVNULL,
        )
        self.processes.append(process)
        return process

    def query(self, sql: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.settings.database_url) as conn:
            return conn.execute(sql, params or None).fetchall()  # type: ignore[arg-type]

    def count(self, where: str, conn: psycopg.Connection[tuple] | None = None) -> int:
        """Rows of ``email_sends`` matching ``where``, on ``conn`` or a new connection."""
        sql = f"SELECT count(*) FROM email_sends WHERE {where}"
        if conn is None:
            return int(self.query(sql)[0][0])
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0

    def wait_for(
        self, where: str, target: int, timeout: float = 600, interval: float = 0.1
    ) -> None:
        """Until ``target`` rows match, counting every ``interval`` s on one connection
        (each count scans the table: poll slowly while measuring something else)."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.settings.database_url, autocommit=True) as conn:
            while (count := self.count(where, conn)) < target:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{where}: {count} of {target}")
                time.sleep(interval)

    def transactions(self) -> int:
        """Transactions in this benchmark's database so far (:func:`database_transactions`)."""
        return database_transactions(self.settings.database_url)

    def statements(self) -> tuple[Counter[str], Counter[str]] | None:
        """Statements in this benchmark's database so far and their execution ms, by
        statement (:func:`statement_counts`)."""
        return statement_counts(self.settings.database_url)

    @staticmethod
    def stop(process: subprocess.Popen[bytes]) -> int:
        """SIGTERM a process; return its peak resident set in MB."""
        peak_kb = 0
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak_kb = int(line.split()[1])
        process.send_signal(signal.SIGTERM)
        process.wait(120)
        return peak_kb // 1024

    def close(self) -> None:
        for process in reversed(self.processes):  # consumers before the sandbox they call
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(120)
        drop_database(self._admin_url, self.dbname)
