"""Peer benchmark: Debezium's PostgreSQL connector with its outbox event router
(``io.debezium.transforms.outbox.EventRouter``) under Kafka Connect standalone, against the
relay's figures (bench/relay_throughput.py).

    python bench/peers/debezium_outbox.py [--rows 100000] [--rate 500] [--seconds 20] [--runs 3]

Starts its own PostgreSQL cluster (wal_level=logical, port 5433) and Connect, both stopped
and removed at the end (bench/peers/debezium_stack.py); the broker is the shared one. The
connector runs with Debezium's defaults (pgoutput, a filtered publication, no snapshot).
Each run routes to topics of its own (aggregatetype = run name), created beforehand with
LogAppendTime, so a message's timestamp is the moment the broker appended it:

- rows/s: ``--rows`` rows committed in 10 transactions, counted from the first commit to
  the broker's append of the last one (bench/broker_times.py, as the relay's);
- commit→broker: rows committed one by one at ``--rate``/s for ``--seconds``; each row's
  broker append time minus its commit time, p50 and p99.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import debezium_stack as stack
import psycopg
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from broker_times import APPEND_TIME, append_times, commit_in_transactions
from results import record


def throughput(url: str, bootstrap: str, topic: str, kind: str, rows: int, log: Path) -> float:
    committed = commit_in_transactions(
        url,
        "INSERT INTO outbox (aggregatetype, aggregateid, payload)"
        f" SELECT '{kind}', '{kind}-' || n, '{{\"template\": \"welcome\"}}'"
        " FROM generate_series(%(first)s::int, %(last)s::int) n",
        rows,
    )
    appended = append_times(bootstrap, [topic], rows, timeout=600)
    if len(appended) < rows:
        raise RuntimeError(f"{len(appended)} of {rows} rows reached {topic}: {stack.errors(log)}")
    return rows / (max(appended.values()) - committed)


def latency(
    url: str, bootstrap: str, topic: str, kind: str, rate: int, seconds: int
) -> list[float]:
    commit_times: dict[str, float] = {}
    result: dict[str, float] = {}
    total = rate * seconds
    reader = threading.Thread(
        target=lambda: result.update(
            append_times(bootstrap, [topic], total, timeout=seconds + 120)
        )
    )
    reader.start()
    with psycopg.connect(url, autocommit=True) as conn:
        next_at = time.monotonic()
        for n in range(total):
            key = f"{kind}-{n}"
            commit_times[key] = time.time()  # autocommit: the INSERT commits on return
            conn.execute(
                "INSERT INTO outbox (aggregatetype, aggregateid, payload) VALUES (%s, %s, '{}')",
                (kind, key),
            )
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    reader.join()
    return [result[key] - commit_times[key] for key in result]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bootstrap = os.environ.get("MAILBUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    prefix = f"dbzbench-{uuid.uuid4().hex[:8]}"
    kinds = [(f"tp{n}", f"lat{n}") for n in range(1, args.runs + 1)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"{prefix}.{k}", 3, 1, config=APPEND_TIME) for pair in kinds for k in pair]
    for future in admin.create_topics(topics).values():
        future.result(30)
    stack.jars()
    with stack.cluster() as url, stack.connect(prefix) as log:
        stack.wait_streaming(url, log)
        for n, (tp, lat) in enumerate(kinds, 1):
            rate = throughput(url, bootstrap, f"{prefix}.{tp}", tp, args.rows, log)
            delays = latency(url, bootstrap, f"{prefix}.{lat}", lat, args.rate, args.seconds)
            if len(delays) < args.rate * args.seconds:
                raise RuntimeError(f"{len(delays)} of {args.rate * args.seconds} latency rows")
            p50, p99 = (statistics.quantiles(delays, n=100)[q - 1] * 1000 for q in (50, 99))
            record("debezium rows/s", rate, "rows/s")
            record(f"debezium commit→broker p50 at {args.rate}/s", p50, "ms")
            record(f"debezium commit→broker p99 at {args.rate}/s", p99, "ms")
            print(
                f"run {n}: {rate:,.0f} rows/s over {args.rows:,} rows | commit→broker at"
                f" {args.rate}/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(delays)} samples)",
                flush=True,
            )


if __name__ == "__main__":
    main()
