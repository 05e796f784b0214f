"""Delivery benchmark: emails/s for one and two consumer processes, commit→accepted
latency at a steady rate, and peak RSS per consumer.

    python bench/delivery_throughput.py [--rows 30000] [--runs 3] [--latency-ms 50]
                                        [--in-flight 64] [--no-send-events]

Needs the local stack (make stack-up). The sandbox answers every send after
``--latency-ms``; the bound is in-flight ÷ latency per process (64 / 50 ms = 1,280/s).
For scale it first measures the call path alone: a bare ``HttpProvider`` keeping
``--in-flight`` sends open, no Kafka or PostgreSQL, and the CPU this benchmark's process
(the client alone: the sandbox is another process) spends per send meanwhile. Rows are
published by the relay before the consumers start, so the consumers alone are measured;
the rate is that of the middle 80% of acceptances. The one-process rate is measured
``--runs`` times (this machine is noisy) and each run printed with the median. Prints
figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections import Counter
from dataclasses import dataclass

import psycopg
from harness import Bench, CpuSampler, cpu_between, percentile, processes_cpu
from results import record, record_series

from mailbus.consumer.provider import HttpProvider, OutgoingMail
from mailbus.kernel.settings import load_settings
from mailbus_client.sqlfiles import load_queries

SANDBOX_PORT = 8099


async def call_path_alone(
    url: str, api_key: str, in_flight: int, seconds: float
) -> tuple[float, float, float]:
    """Sends/s, mean latency (ms) and the client's CPU per send (ms) of ``in_flight``
    back-to-back senders."""
    provider = HttpProvider(url, api_key, 2.0, 15.0, in_flight)
    keys = itertools.count()
    latencies: list[float] = []

    async def sender(until: float) -> None:
        while time.monotonic() < until:
            started = time.monotonic()
            await provider.send(OutgoingMail(f"alone-{next(keys)}", "u@example.com", "welcome", {}))
            latencies.append(time.monotonic() - started)

    await asyncio.gather(*(sender(time.monotonic() + 2) for _ in range(in_flight)))  # warm-up
    latencies.clear()
    started, cpu_started = time.monotonic(), time.process_time()
    await asyncio.gather(*(sender(started + seconds) for _ in range(in_flight)))
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
    await provider.aclose()
    sends = len(latencies)
    return sends / elapsed, statistics.mean(latencies) * 1000, cpu / sends * 1000


def seed(bench: Bench, rows: int, prefix: str) -> None:
    bench.query(
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
        " SELECT %s || n, 'u' || n || '@example.com', 'welcome', 'p1'"
        " FROM generate_series(1, %s) n RETURNING 1",
        prefix,
        rows,
    )


@dataclass(frozen=True)
class Throughput:
    rate: float  # emails/s, the middle 80% of acceptances
    rss_mb: list[int]  # peak per consumer
    cpu_ms_per_mail: float  # the consumers' utime + stime ÷ mails, over the middle 80%
    transactions_per_mail: float  # the database's transactions ÷ mails (Bench.transactions)
    statements: Counter[str] | None  # by query name (Bench.statements); None: not loaded
    database_ms: float | None  # their execution time, ms; None: not loaded


def query_names() -> dict[str, str]:
    """The first line of each of the consumer's and the relay's named queries → its name."""
    names = {}
    for package in ("mailbus.consumer", "mailbus.relay"):
        for name, text in load_queries(package, "queries.sql").items():
            names[text.split("\n", 1)[0]] = name
    return names


def by_name(counts: Counter[str]) -> Counter[str]:
    """Statement counts keyed by query name where the first line is a known query's."""
    names = query_names()
    named: Counter[str] = Counter()
    for first_line, calls in counts.items():
        named[names.get(first_line, first_line[:40])] += calls
    return named


def throughput(
    bench: Bench, consumers: int, rows: int, env: dict[str, str], run: int
) -> Throughput:
    prefix = f"tp{consumers}-{run}-"
    seed(bench, rows, prefix)
    bench.wait_for(f"dedupe_key LIKE '{prefix}%' AND published_at IS NOT NULL", rows)
    transactions = bench.transactions()
    statements = bench.statements()
    procs = [bench.start("consume", "--priority", "p1", **env) for _ in range(consumers)]
    sampler = CpuSampler({"consumers": processes_cpu(procs)})
    sampler.start()
    bench.wait_for(f"dedupe_key LIKE '{prefix}%' AND status = 'accepted'", rows, interval=1.0)
    samples = sampler.stop()
    # The middle 80% of acceptances: start-up and the last stragglers left out.
    [(first, last)] = bench.query(
        "SELECT percentile_disc(0.1) WITHIN GROUP (ORDER BY accepted_at),"
        " percentile_disc(0.9) WITHIN GROUP (ORDER BY accepted_at)"
        " FROM email_sends WHERE dedupe_key LIKE %s",
        f"{prefix}%",
    )
    rss = [Bench.stop(p) for p in procs]
    transactions = bench.transactions() - transactions
    statements_after = bench.statements()
    named, database_ms = None, None
    if statements is not None and statements_after is not None:
        named = by_name(statements_after[0] - statements[0])
        database_ms = sum((statements_after[1] - statements[1]).values())
    return Throughput(
        0.8 * rows / (last - first).total_seconds(),
        rss,
        1000
        * cpu_between(samples, first.timestamp(), last.timestamp())["consumers"]
        / (0.8 * rows),
        transactions / rows,
        named,
        database_ms,
    )


def steady_latency(
    bench: Bench, rate: int, seconds: int, env: dict[str, str]
) -> tuple[list[float], int]:
    consumer = bench.start("consume", "--priority", "p1", **env)
    time.sleep(5)  # joined the group
    with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
        next_at = time.monotonic()
        for n in range(rate * seconds):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES"
                " (%s, 'u@example.com', 'welcome')",
                (f"steady-{n}",),
            )
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    bench.wait_for(
        "dedupe_key LIKE 'steady-%' AND status = 'accepted'", rate * seconds, interval=1.0
    )
    delays = [
        float(d)
        for (d,) in bench.query(
            "SELECT extract(epoch FROM accepted_at - created_at) FROM email_sends"
            " WHERE dedupe_key LIKE 'steady-%'"
        )
    ]
    return delays, Bench.stop(consumer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3, help="runs of the one-process rate")
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--max-consumers", type=int, choices=(1, 2), default=2)
    parser.add_argument(
        "--steady",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure commit→accepted at --rate for --seconds",
    )
    parser.add_argument(
        "--send-events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--no-send-events: no outcome events (their trigger disabled), for an A/B",
    )
    args = parser.parse_args()
    bench = Bench(load_settings())
    if not args.send_events:
        with psycopg.connect(bench.settings.database_url) as conn:
            conn.execute("ALTER TABLE email_sends DISABLE TRIGGER email_sends_record_event_update")
    env = {
        "MAILBUS_PROVIDER_URL": f"http://127.0.0.1:{SANDBOX_PORT}",
        "MAILBUS_PROVIDER_API_KEY": "bench-key",
        "MAILBUS_MAX_IN_FLIGHT": str(args.in_flight),
    }
    try:
        bench.start(
            "sandbox",
            "--port",
            str(SANDBOX_PORT),
            "--latency-ms",
            str(args.latency_ms),
            "--api-key",
            "bench-key",
        )
        bench.start("relay")
        time.sleep(2)
        bound = args.in_flight / (args.latency_ms / 1000)
        alone, latency, cpu_per_send = asyncio.run(
            call_path_alone(env["MAILBUS_PROVIDER_URL"], "bench-key", args.in_flight, 8)
        )
        print(
            f"call path alone ({args.in_flight} sends open, no Kafka or PostgreSQL):"
            f" {alone:,.0f} sends/s = {alone / bound:.0%} of the bound, {latency:.1f} ms each,"
            f" client CPU {cpu_per_send:.3f} ms/send",
            flush=True,
        )
        record(f"call path alone at {args.in_flight} in flight", alone, "sends/s")
        record(f"call path client CPU per send at {args.in_flight} in flight", cpu_per_send, "ms")
        for consumers, runs in ((1, args.runs), (2, 1))[: args.max_consumers]:
            rates = []
            for run in range(runs):
                measured = throughput(bench, consumers, args.rows * consumers, env, run)
                rate, rss = measured.rate, measured.rss_mb
                rates.append(rate)
                label = f"{consumers} consumer(s) at {args.in_flight} in flight"
                record(f"delivery emails/s, {label}", rate, "emails/s")
                record(f"consumer CPU per mail, {label}", measured.cpu_ms_per_mail, "ms")
                record(
                    f"database transactions per mail, {label}",
                    measured.transactions_per_mail,
                    "transactions",
                )
                share = 100 * rate / (bound * consumers)
                record(f"delivery share of the bound, {label}", share, "%")
                record(f"consumer peak RSS, {label}", max(rss), "MB")
                print(
                    f"{consumers} consumer(s): {rate:,.0f} emails/s ="
                    f" {rate / (bound * consumers):.0%} of the bound {bound * consumers:,.0f}/s"
                    f" | peak RSS {rss} MB | CPU {measured.cpu_ms_per_mail:.2f} ms/mail"
                    f" | {measured.transactions_per_mail:.2f} transactions/mail",
                    flush=True,
                )
                if measured.statements is not None and measured.database_ms is not None:
                    mails = args.rows * consumers
                    per_mail = sum(measured.statements.values()) / mails
                    record(f"database statements per mail, {label}", per_mail, "statements")
                    record(f"database time per mail, {label}", measured.database_ms / mails, "ms")
                    print(
                        f"  database time {measured.database_ms / mails:.3f} ms/mail;"
                        f" statements/mail {per_mail:.2f}: "
                        + ", ".join(
                            f"{name} {calls / mails:.3f}"
                            for name, calls in measured.statements.most_common(8)
                        ),
                        flush=True,
                    )
            if runs > 1:
                median = statistics.median(rates)
                print(
                    f"{consumers} consumer(s), median of {runs} runs: {median:,.0f} emails/s"
                    f" = {median / (bound * consumers):.0%} of the bound",
                    flush=True,
                )
        if not args.steady:
            return
        delays, rss = steady_latency(bench, args.rate, args.seconds, env)
        for q in (50, 99):
            at = f"at {args.rate}/s"
            record(f"delivery commit→accepted p{q} {at}", percentile(delays, q) * 1000, "ms")
        record_series("delivery commit→accepted (s)", delays)
        provider = args.latency_ms / 1000
        print(
            f"steady {args.rate}/s for {args.seconds}s: commit→accepted p50 "
            f"{percentile(delays, 50) * 1000:.0f} ms, p99 {percentile(delays, 99) * 1000:.0f} ms"
            f" ({(percentile(delays, 99) - provider) * 1000:.0f} ms above the provider's"
            f" {args.latency_ms:.0f} ms) | peak RSS {rss} MB"
        )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
