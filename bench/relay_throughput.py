"""Relay benchmark: throughput, commit→broker-ack latency and peak RSS, batched vs naive.

    make bench        (or: python bench/relay_throughput.py [--rows 100000])

Needs the local stack (make stack-up). Creates its own database and topics; the topics
use LogAppendTime, so each message's timestamp is the moment the broker appended it.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mailbus.migrate import apply_migrations  # noqa: E402
from mailbus.settings import Settings, load_settings  # noqa: E402
from schemas.codec import send_pointer_codec  # noqa: E402


def fresh_environment(base: Settings) -> Settings:
    name = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = psycopg.conninfo.make_conninfo(base.database_url, dbname=name)
    apply_migrations(url)
    settings = replace(base, database_url=url, topic_prefix=f"bench-{uuid.uuid4().hex[:8]}")
    admin_client = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    topics = [settings.topic(p) for p in ("p0", "p1", "p2")]
    config = {"message.timestamp.type": "LogAppendTime"}
    for future in admin_client.create_topics(
        [NewTopic(t, 6, 1, config=config) for t in topics]
    ).values():
        future.result(30)
    return settings


def start_relay(settings: Settings, batch_size: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        MAILBUS_DATABASE_URL=settings.database_url,
        MAILBUS_TOPIC_PREFIX=settings.topic_prefix,
        MAILBUS_RELAY_BATCH_SIZE=str(batch_size),
        MAILBUS_LOG_LEVEL="WARNING",
    )
    return subprocess.Popen([sys.executable, "-m", "mailbus", "relay"], cwd=REPO, env=env)


def stop_relay(relay: subprocess.Popen[bytes]) -> int:
    """SIGTERM the relay; return its peak resident set in KiB."""
    peak = 0
    status = Path(f"/proc/{relay.pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1])
    relay.send_signal(signal.SIGTERM)
    relay.wait(60)
    return peak


def published(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends WHERE published_at IS NOT NULL"
        ).fetchone()
        return int(row[0]) if row else 0


def measure_throughput(settings: Settings, rows: int, batch_size: int) -> tuple[float, int]:
    with psycopg.connect(settings.database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
            " SELECT 'tp-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
            " FROM generate_series(1, %s) n",
            (rows,),
        )
    relay = start_relay(settings, batch_size)
    started = time.monotonic()
    while published(settings.database_url) < rows:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    return rows / elapsed, stop_relay(relay)


def measure_latency(
    settings: Settings, rate: int, seconds: int, batch_size: int
) -> tuple[list[float], int]:
    relay = start_relay(settings, batch_size)
    time.sleep(2)  # connected and idle
    commit_times: dict[str, float] = {}
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([settings.topic("p0")])
    consumer.poll(3)  # join before producing
    latencies: list[float] = []
    done = threading.Event()

    def read() -> None:
        codec = send_pointer_codec()
        while not done.is_set() or len(latencies) < len(commit_times):
            message = consumer.poll(0.2)
            if message is None or message.error():
                if done.is_set() and message is None:
                    break
                continue
            key = codec.decode(message.value())["dedupe_key"]
            appended_ms = message.timestamp()[1]
            if key in commit_times:
                latencies.append(appended_ms / 1000 - commit_times[key])

    reader = threading.Thread(target=read)
    reader.start()
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        interval = 1 / rate
        next_at = time.monotonic()
        for n in range(rate * seconds):
            key = f"lat-{batch_size}-{n}"
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " VALUES (%s, 'u@example.com', 'code', 'p0')",
                (key,),
            )
            commit_times[key] = time.time()
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
    time.sleep(3)
    done.set()
    reader.join(60)
    consumer.close()
    return latencies, stop_relay(relay)


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else float("nan")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--naive-rows", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    base = load_settings()
    results = {}
    for label, batch, rows in (
        ("batched", 2000, args.rows),
        ("naive (1 row/tx)", 1, args.naive_rows),
    ):
        rate, rss_tp = measure_throughput(fresh_environment(base), rows, batch)
        latencies, rss_lat = measure_latency(
            fresh_environment(base), args.rate, args.seconds, batch
        )
        results[label] = rate
        print(
            f"{label:>17}: {rate:>9,.0f} rows/s over {rows:,} rows | "
            f"commit->ack at {args.rate}/s: p50 {percentile(latencies, 50) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 99) * 1000:.1f} ms ({len(latencies)} samples) | "
            f"peak RSS {max(rss_tp, rss_lat) / 1024:.0f} MB",
            flush=True,
        )
    print(f"speed-up batched / naive: {results['batched'] / results['naive (1 row/tx)']:.1f}x")


if __name__ == "__main__":
    main()
