"""Peer benchmark: PgQueuer's enqueue → dequeue → complete cycle on the same PostgreSQL,
each job making the HTTP call mailbus's consumer makes.

    python bench/peers/pgqueuer_cycle.py [--jobs 30000] [--in-flight 64] [--latency-ms 50]
                                         [--runs 3]

What a user would pick instead of mailbus's delivery path when the queue may live in
PostgreSQL alone (PyPI ``pgqueuer`` with its asyncpg driver, as its README sets it up; the
``bench`` extra installs it). Each run gets a fresh database with PgQueuer's schema,
enqueues ``--jobs`` jobs (1,000 per call) and then drains them with one ``QueueManager`` in
this process keeping ``--in-flight`` jobs at once (our MAILBUS_MAX_IN_FLIGHT default), in
two variants of ``--runs`` runs each:

- with the HTTP call: each job sends one mail as ``mailbus consume`` does by default, through
  an ``HttpProvider`` (its default aiohttp transport, the consumer's default timeouts,
  ``--in-flight`` connections) to the sandbox answering after ``--latency-ms`` (``mailbus
  sandbox`` on a free port, in its own process), every mail accepted: the call
  bench/delivery_throughput.py's consumer makes, under the same in-flight limit;
- without a call: PgQueuer's own ceiling.

Per run it prints and records enqueue jobs/s, dequeue → complete jobs/s over the middle 80%
of completions (``harness.middle_80``), the worker's CPU per job (this process's
process_time over the drain ÷ jobs; the sandbox's CPU is its own process's) and PostgreSQL
transactions per job (the scratch database's pg_stat_database delta over the drain), then
min / median / max of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import asyncpg
import psycopg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import harness  # before any mailbus import: it puts this checkout first on sys.path
from call_path import send_accepted
from results import record

from mailbus.app.scratch_database import drop_database
from mailbus.consumer.provider import HttpProvider, OutgoingMail
from mailbus.kernel.settings import Settings

API_KEY = "bench-key"
CALL, NO_CALL = "with HTTP call", "without call"


@dataclass(frozen=True)
class Drain:
    jobs_per_s: float  # the middle 80% of completions
    cpu_ms_per_job: float  # this process's CPU over the drain ÷ jobs
    transactions_per_job: float  # the scratch database's, over the drain ÷ jobs


async def install_and_enqueue(url: str, jobs: int, key_prefix: str) -> float:
    """PgQueuer's schema, then ``jobs`` jobs whose payloads are unique dedupe keys; jobs/s of
    the enqueueing."""
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        started = time.monotonic()
        for first in range(0, jobs, 1000):
            count = min(1000, jobs - first)
            payloads: list[bytes | None] = [
                f"{key_prefix}-{first + n}".encode() for n in range(count)
            ]
            await queries.enqueue(["send"] * count, payloads, [0] * count)
        return jobs / (time.monotonic() - started)
    finally:
        await conn.close()


async def drain(url: str, in_flight: int, provider_url: str | None) -> tuple[list[float], float]:
    """Dequeue and complete every job, each sending its mail to ``provider_url`` (None: no
    call); the completion times and this process's CPU seconds over the drain."""
    provider = None
    if provider_url is not None:
        provider = HttpProvider(
            provider_url,
            API_KEY,
            connect_timeout=Settings.connect_timeout,
            request_timeout=Settings.request_timeout,
            max_connections=in_flight,
        )
    completions: list[float] = []
    conn = await asyncpg.connect(url)
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("send")
        async def send(job: Job) -> None:
            if provider is not None:
                key = (job.payload or b"").decode()
                await send_accepted(provider, OutgoingMail(key, "u@example.com", "welcome", {}))
            completions.append(time.monotonic())

        cpu_started = time.process_time()
        await pgq.qm.run(
            batch_size=in_flight // 2,
            max_concurrent_tasks=in_flight,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=1),
        )
        cpu = time.process_time() - cpu_started
    finally:
        await conn.close()
        if provider is not None:
            await provider.aclose()
    return completions, cpu


def one_run(
    admin_url: str, jobs: int, in_flight: int, provider_url: str | None
) -> tuple[float, Drain]:
    """(enqueue jobs/s, the drain's figures) on a database of its own."""
    dbname = f"pgqueuer_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    url = admin_url.rsplit("/", 1)[0] + f"/{dbname}"
    try:
        enqueue_rate = asyncio.run(install_and_enqueue(url, jobs, dbname))
        transactions_before = harness.database_transactions(url)
        completions, cpu = asyncio.run(drain(url, in_flight, provider_url))
        transactions = harness.database_transactions(url) - transactions_before
    finally:
        drop_database(admin_url, dbname)
    if len(completions) != jobs:
        raise RuntimeError(f"{len(completions)} of {jobs} jobs completed")
    figures = Drain(harness.middle_80(completions), 1000 * cpu / jobs, transactions / jobs)
    return enqueue_rate, figures


def spread(values: list[float], spec: str) -> str:
    """``min / median / max``, each formatted with ``spec``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:{spec}} / {mid:{spec}} / {high:{spec}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=50, help="the sandbox's")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    admin_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    sandbox = ["mailbus", "sandbox", "--api-key", API_KEY, "--latency-ms", str(args.latency_ms)]
    with harness.serving([*sandbox, "--port"], "/_sandbox/health") as sandbox_url:
        for label, provider_url in ((CALL, sandbox_url), (NO_CALL, None)):
            runs = []
            for run in range(1, args.runs + 1):
                enqueued, drained = one_run(admin_url, args.jobs, args.in_flight, provider_url)
                runs.append(drained)
                at = f"{label}, {args.in_flight} in flight"
                record("pgqueuer enqueue jobs/s (1,000 per call)", enqueued, "jobs/s")
                record(f"pgqueuer jobs/s {at}", drained.jobs_per_s, "jobs/s")
                record(f"pgqueuer worker CPU per job {at}", drained.cpu_ms_per_job, "ms")
                record(
                    f"pgqueuer transactions per job {at}",
                    drained.transactions_per_job,
                    "transactions",
                )
                print(
                    f"run {run} {label}: enqueue {enqueued:,.0f} jobs/s,"
                    f" dequeue → complete {drained.jobs_per_s:,.0f} jobs/s (middle 80%),"
                    f" worker CPU {drained.cpu_ms_per_job:.3f} ms/job,"
                    f" {drained.transactions_per_job:.3f} transactions/job",
                    flush=True,
                )
            print(
                f"PgQueuer {label}, min / median / max:"
                f" {spread([r.jobs_per_s for r in runs], ',.0f')} jobs/s"
                f" | worker CPU {spread([r.cpu_ms_per_job for r in runs], '.3f')} ms/job"
                f" | {spread([r.transactions_per_job for r in runs], '.3f')} transactions/job",
                flush=True,
            )


if __name__ == "__main__":
    main()
