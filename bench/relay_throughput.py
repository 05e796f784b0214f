"""Relay benchmark: rows/s against PostgreSQL's claim+mark ceiling, commit→broker-append
latency and peak RSS, batched vs naive.

    python bench/relay_throughput.py [--rows 100000] [--naive-rows 10000] [--rate 500]

Needs the local stack (make stack-up). Each measurement gets its own database and topics;
the topics use LogAppendTime, so a message's timestamp is the moment the broker appended
it. The naive relay is the same code with one row per transaction. Prints figures:

- **relay rows/s**: the relay already running and idle (its listeners connected), then
  ``--rows`` rows committed in 10 transactions; rows ÷ (first COMMIT → the broker's append
  of the last one). The same method and code as the Debezium peer
  (bench/broker_times.py, bench/peers/debezium_outbox.py);
- **claim+mark ceiling**: the relay's own claim query (relay/queries.sql ``claim_due``,
  which marks the rows published) run batch after batch, one transaction each, by a plain
  psycopg loop with no Kafka, over ``--rows`` rows committed beforehand; rows ÷ the loop's
  time. What PostgreSQL allows one claimer; the relay's ratio to it is printed;
- **commit→ack**: rows committed one by one at ``--rate``/s, each row's broker append time
  minus its commit time, p50 and p99.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

import psycopg
from broker_times import APPEND_TIME, append_times, commit_in_transactions
from confluent_kafka import Consumer
from harness import (
    Bench,
    CpuSampler,
    cpu_between,
    machine_busy,
    named_cpu,
    own_cpu,
    percentile,
    processes_cpu,
)
from results import record

from mailbus.kernel.settings import load_settings
from mailbus.schemas.codec import send_pointer_codec
from mailbus_client.sqlfiles import load_queries

INSERT = (
    "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
    " SELECT 'tp-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
    " FROM generate_series(%(first)s::int, %(last)s::int) n"
)


def wait_until_idle(bench: Bench, timeout: float = 60) -> None:
    """Until the relay's listeners are connected (pg_stat_activity), then a second more so
    every lane has made its first, empty pass."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
        while not conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN mailbus_outbox%'"
        ).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise TimeoutError("the relay did not start listening")
            time.sleep(0.1)
    time.sleep(1.0)


def measure_throughput(rows: int, batch_size: int) -> tuple[float, int, dict[str, float]]:
    """Relay rows/s (first COMMIT → last broker append, relay already running), its peak
    RSS in MB, and where the machine's CPU went in that window (:func:`cpu_per_row`)."""
    bench = Bench(load_settings(), APPEND_TIME)
    try:
        relay = bench.start("relay", MAILBUS_RELAY_BATCH_SIZE=str(batch_size))
        wait_until_idle(bench)
        sampler = CpuSampler(
            {
                "machine": machine_busy,
                "relay": processes_cpu([relay]),
                "postgres": named_cpu("postgres"),
                "broker": named_cpu("java", "kafka.Kafka"),
                "benchmark": own_cpu,
            }
        )
        sampler.start()
        first_commit = commit_in_transactions(bench.settings.database_url, INSERT, rows)
        topic = bench.settings.topic("p1")
        appended = append_times(bench.settings.kafka_bootstrap, [topic], rows, timeout=600)
        if len(appended) < rows:
            raise RuntimeError(f"{len(appended)} of {rows} rows reached {topic}")
        last_append = max(appended.values())
        cpu = cpu_per_row(sampler.stop(), first_commit, last_append, rows)
        return rows / (last_append - first_commit), Bench.stop(relay), cpu
    finally:
        bench.close()


def measure_ceiling(rows: int, batch_size: int) -> tuple[float, dict[str, float]]:
    """Rows/s of the relay's claim+mark SQL alone: batch after batch, no Kafka; and where
    the machine's CPU went meanwhile."""
    bench = Bench(load_settings())
    try:
        commit_in_transactions(bench.settings.database_url, INSERT, rows, transactions=1)
        claim = load_queries("mailbus.relay", "queries.sql")["claim_due"]
        sampler = CpuSampler(
            {"machine": machine_busy, "postgres": named_cpu("postgres"), "benchmark": own_cpu}
        )
        with psycopg.connect(bench.settings.database_url) as conn:
            sampler.start()
            started = time.time()
            claimed = 0
            while batch := conn.execute(claim, {"limit": batch_size}).fetchall():
                conn.commit()
                claimed += len(batch)
            ended = time.time()
        if claimed != rows:
            raise RuntimeError(f"the ceiling loop claimed {claimed} of {rows} rows")
        return rows / (ended - started), cpu_per_row(sampler.stop(), started, ended, rows)
    finally:
        bench.close()


def cpu_per_row(
    samples: list[tuple[float, dict[str, float]]], start: float, end: float, rows: int
) -> dict[str, float]:
    """Each group's CPU µs per row between ``start`` and ``end``, "other" for the machine's
    busy time no group accounts for, and "busy": the share of all cores busy."""
    used = cpu_between(samples, start, end)
    machine = used.pop("machine")
    shares = {name: seconds * 1e6 / rows for name, seconds in used.items()}
    shares["other"] = max(0.0, machine - sum(used.values())) * 1e6 / rows
    shares["busy"] = machine / ((end - start) * (os.cpu_count() or 1))
    return shares


def cpu_line(cpu: dict[str, float]) -> str:
    parts = ", ".join(f"{name} {us:.1f}" for name, us in cpu.items() if name != "busy")
    return f"CPU µs/row: {parts}; cores busy {cpu['busy']:.0%}"


def measure_latency(rate: int, seconds: int, batch_size: int) -> tuple[list[float], int]:
    bench = Bench(load_settings(), APPEND_TIME)
    try:
        relay = bench.start("relay", MAILBUS_RELAY_BATCH_SIZE=str(batch_size))
        consumer = Consumer(
            {
                "bootstrap.servers": bench.settings.kafka_bootstrap,
                "group.id": uuid.uuid4().hex,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([bench.settings.topic("p0")])
        commit_times: dict[str, float] = {}
        latencies: list[float] = []
        done = threading.Event()

        def read() -> None:
            codec = send_pointer_codec()
            while not (done.is_set() and len(latencies) >= len(commit_times)):
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                key = codec.decode(message.value())["dedupe_key"]
                latencies.append(message.timestamp()[1] / 1000 - commit_times[key])

        wait_until_idle(bench)
        reader = threading.Thread(target=read, daemon=True)
        with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
            reader.start()
            next_at = time.monotonic()
            for n in range(rate * seconds):
                key = f"lat-{n}"
                commit_times[key] = time.time()  # autocommit: the INSERT commits on return
                conn.execute(
                    "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                    " VALUES (%s, 'u@example.com', 'code', 'p0')",
                    (key,),
                )
                next_at += 1 / rate
                time.sleep(max(0.0, next_at - time.monotonic()))
        done.set()
        reader.join(60)
        consumer.close()
        return latencies, Bench.stop(relay)
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--naive-rows", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    rates = {}
    for label, batch, rows in (("batched", 2000, args.rows), ("naive", 1, args.naive_rows)):
        rate, rss_tp, cpu = measure_throughput(rows, batch)
        latencies, rss_lat = measure_latency(args.rate, args.seconds, batch)
        rates[label] = rate
        record(f"relay rows/s, {label}", rate, "rows/s")
        for q in (50, 99):
            at = f"at {args.rate}/s, {label}"
            record(f"relay commit→ack p{q} {at}", percentile(latencies, q) * 1000, "ms")
        record(f"relay peak RSS, {label}", max(rss_tp, rss_lat), "MB")
        print(
            f"{label:>8} relay: {rate:>8,.0f} rows/s over {rows:,} rows | commit→ack at"
            f" {args.rate}/s: p50 {percentile(latencies, 50) * 1000:.1f} ms,"
            f" p99 {percentile(latencies, 99) * 1000:.1f} ms ({len(latencies)} samples) |"
            f" peak RSS {max(rss_tp, rss_lat)} MB",
            flush=True,
        )
        if label == "batched":
            record_cpu("relay run", cpu)
            print(f"  relay run: {cpu_line(cpu)}", flush=True)
    ceiling, ceiling_cpu = measure_ceiling(args.rows, 2000)
    record("claim+mark ceiling rows/s", ceiling, "rows/s")
    record_cpu("ceiling loop", ceiling_cpu)
    record("relay / claim+mark ceiling", rates["batched"] / ceiling, "ratio")
    print(
        f"claim+mark ceiling: {ceiling:,.0f} rows/s over {args.rows:,} rows (batches of 2,000,"
        f" no Kafka) | relay / ceiling: {rates['batched'] / ceiling:.2f}"
    )
    print(f"  ceiling loop: {cpu_line(ceiling_cpu)}")
    print(f"batched / naive throughput: {rates['batched'] / rates['naive']:.1f}x")


def record_cpu(run: str, cpu: dict[str, float]) -> None:
    for name, value in cpu.items():
        if name == "busy":
            record(f"{run}: cores busy", value, "ratio")
        else:
            record(f"{run}: {name} CPU per row", value, "µs")


if __name__ == "__main__":
    main()
