"""Peer benchmark: PgQueuer's enqueue → dequeue → complete cycle on the same PostgreSQL.

    python bench/peers/pgqueuer_cycle.py [--jobs 30000] [--in-flight 64] [--runs 3]

What a user would pick instead of mailbus's delivery path when the queue may live in
PostgreSQL alone (PyPI ``pgqueuer`` with its asyncpg driver, as its README sets it up; the ``bench``
extra installs it). Each run gets a
fresh database with PgQueuer's schema, enqueues ``--jobs`` jobs (1,000 per call) and drains
them with one ``QueueManager`` keeping ``--in-flight`` jobs at once (our
MAILBUS_MAX_IN_FLIGHT default): once with a 50 ms simulated provider call per job
(``asyncio.sleep``; mailbus's figure is an HTTP call to the sandbox), once with none.
Prints and records enqueue jobs/s and dequeue → complete jobs/s per run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg
import psycopg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from results import record

from mailbus.app.scratch_database import drop_database


async def cycle(url: str, jobs: int, in_flight: int, call_ms: float) -> tuple[float, float]:
    """(enqueue jobs/s, dequeue → complete jobs/s) on a database with PgQueuer's schema."""
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        started = time.monotonic()
        for first in range(0, jobs, 1000):
            count = min(1000, jobs - first)
            payloads = [f"send-{first + n}".encode() for n in range(count)]
            await queries.enqueue(["send"] * count, payloads, [0] * count)
        enqueue_rate = jobs / (time.monotonic() - started)
    finally:
        await conn.close()
    conn = await asyncpg.connect(url)
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))
        done, last_done = 0, 0.0

        @pgq.entrypoint("send")
        async def send(job: Job) -> None:
            nonlocal done, last_done
            if call_ms:
                await asyncio.sleep(call_ms / 1000)
            done += 1
            last_done = time.monotonic()

        started = time.monotonic()
        await pgq.qm.run(
            batch_size=in_flight // 2,
            max_concurrent_tasks=in_flight,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=1),
        )
        elapsed = last_done - started  # not the drain mode's idle wait before it exits
    finally:
        await conn.close()
    if done != jobs:
        raise RuntimeError(f"{done} of {jobs} jobs completed")
    return enqueue_rate, jobs / elapsed


def one_run(admin_url: str, jobs: int, in_flight: int, call_ms: float) -> tuple[float, float]:
    dbname = f"pgqueuer_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    url = admin_url.rsplit("/", 1)[0] + f"/{dbname}"
    try:

        async def install_and_cycle() -> tuple[float, float]:
            conn = await asyncpg.connect(url)
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()
            return await cycle(url, jobs, in_flight, call_ms)

        return asyncio.run(install_and_cycle())
    finally:
        drop_database(admin_url, dbname)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--call-ms", type=float, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    admin_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    for call_ms, label in ((args.call_ms, f"with {args.call_ms:g} ms call"), (0, "without call")):
        rates = []
        for run in range(1, args.runs + 1):
            enqueued, completed = one_run(admin_url, args.jobs, args.in_flight, call_ms)
            rates.append(completed)
            record(f"pgqueuer jobs/s {label}, {args.in_flight} in flight", completed, "jobs/s")
            record("pgqueuer enqueue jobs/s (1,000 per call)", enqueued, "jobs/s")
            print(
                f"run {run} {label}: enqueue {enqueued:,.0f} jobs/s,"
                f" dequeue → complete {completed:,.0f} jobs/s",
                flush=True,
            )
        print(
            f"PgQueuer {label}: min {min(rates):,.0f} median {statistics.median(rates):,.0f}"
            f" max {max(rates):,.0f} jobs/s"
        )


if __name__ == "__main__":
    main()
