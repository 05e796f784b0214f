"""Relay benchmark: throughput, commit→broker-ack latency and peak RSS, batched vs naive.

    python bench/relay_throughput.py [--rows 100000] [--naive-rows 10000]

Needs the local stack (make stack-up). Each measurement gets its own database and topics;
the topics use LogAppendTime, so a message's timestamp is the moment the broker appended
it. The naive relay is the same code with one row per transaction. Prints figures.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg
from confluent_kafka import Consumer
from harness import Bench, percentile
from results import record

from mailbus.kernel.settings import load_settings
from mailbus.schemas.codec import send_pointer_codec

APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def measure_throughput(rows: int, batch_size: int) -> tuple[float, int]:
    bench = Bench(load_settings(), APPEND_TIME)
    try:
        bench.query(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
            " SELECT 'tp-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
            " FROM generate_series(1, %s) n RETURNING 1",
            rows,
        )
        relay = bench.start("relay", MAILBUS_RELAY_BATCH_SIZE=str(batch_size))
        started = time.monotonic()
        bench.wait_for("published_at IS NOT NULL", rows)
        return rows / (time.monotonic() - started), Bench.stop(relay)
    finally:
        bench.close()


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

        time.sleep(2)  # the relay is idle on LISTEN
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
        rate, rss_tp = measure_throughput(rows, batch)
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
    print(f"batched / naive throughput: {rates['batched'] / rates['naive']:.1f}x")


if __name__ == "__main__":
    main()
