"""Intake benchmark: OrderPlaced events on Kafka → committed email_sends rows, and peak RSS.

    python bench/intake_throughput.py [--events 100000] [--runs 3] [--batch 1000]

Needs the local stack (make stack-up). Each run gets its own database and topics: the
events (distinct orders, 1% duplicates) are published first, then one `mailbus intake`
process starts and reads them all. Printed per run and as min/median/max:

- events/s: events over the span from the first to the last committed batch (the rows'
  ``created_at`` is the ``now()`` of their batch's transaction), i.e. the steady rate;
- with start-up: events over the time from starting the process until the last row is
  committed (includes Python and faust start-up and joining the consumer group);
- peak RSS of the intake process (VmHWM).
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness import Bench
from results import record

from mailbus.intake.sample import publish_records, sample_events
from mailbus.kernel.settings import load_settings
from mailbus.kernel.topics import create_topics


def measure(events: int, batch: int) -> tuple[float, float, int]:
    bench = Bench(load_settings())
    try:
        topic = f"{bench.settings.topic_prefix}.orders.events"
        create_topics(bench.settings, [topic, bench.settings.intake_dlq_topic])
        duplicates = events // 100
        distinct = events - duplicates
        records = sample_events(distinct, duplicates=duplicates, malformed=0, run="bench")
        publish_records(bench.settings, topic, records, timeout=300)
        started = time.monotonic()
        intake = bench.start("intake", MAILBUS_INTAKE_TOPIC=topic, MAILBUS_INTAKE_BATCH=str(batch))
        bench.wait_for("true", distinct, timeout=1800, interval=1.0)
        with_startup = events / (time.monotonic() - started)
        ((span,),) = bench.query(
            "SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM email_sends"
        )
        ((first_batch,),) = bench.query(
            "SELECT count(*) FROM email_sends"
            " WHERE created_at = (SELECT min(created_at) FROM email_sends)"
        )
        steady = (events - first_batch) / float(span) if span else float("nan")
        return steady, with_startup, Bench.stop(intake)
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="MAILBUS_INTAKE_BATCH")
    args = parser.parse_args()
    results = []
    for run in range(1, args.runs + 1):
        steady, with_startup, rss = measure(args.events, args.batch)
        results.append((steady, with_startup, rss))
        record("intake events/s", steady, "events/s")
        record("intake events/s with start-up", with_startup, "events/s")
        record("intake peak RSS", rss, "MB")
        print(
            f"run {run}: {args.events} events, {steady:,.0f} events/s"
            f" ({with_startup:,.0f}/s with start-up), peak RSS {rss} MB",
            flush=True,
        )
    for label, index, unit in (
        ("events/s", 0, ""),
        ("events/s with start-up", 1, ""),
        ("peak RSS", 2, " MB"),
    ):
        values = sorted(result[index] for result in results)
        print(
            f"{label}: min {values[0]:,.0f}{unit}, median {statistics.median(values):,.0f}{unit},"
            f" max {values[-1]:,.0f}{unit}"
        )


if __name__ == "__main__":
    main()
