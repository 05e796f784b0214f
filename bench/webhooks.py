"""Delivery events ingested per second by one `mailbus webhooks` process.

Each request is a signed event through the real server: signature check, parse, one
statement that stores the event once and updates its send (and suppresses on a hard
bounce or complaint). The load: events for ``--sends`` accepted rows, four per row at
random instants, 20% of them sent twice, shuffled, ``--concurrency`` requests at a time
from this process (which shares the machine's cores with the server). Three runs with
fresh event ids against the same rows; prints each and the min/median/max.

    python bench/webhooks.py [--events 6000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from harness import serving  # noqa: E402
from results import record  # noqa: E402

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402
from mailbus.feedback.signature import signature_header  # noqa: E402

SECRET = "bench-webhook-secret-0123456789"
PATH = "/webhooks/bench"
TYPES = ("delivered", "delivered", "delivered", "deferred", "bounced", "complained")


def make_events(run: int, sends: int, count: int, rng: random.Random) -> list[bytes]:
    unique = []
    base = datetime(2026, 12, 1, tzinfo=UTC)
    for n in range(int(count / 1.2)):
        kind = rng.choice(TYPES)
        document = {
            "id": f"r{run}-e{n}",
            "type": kind,
            "message_id": f"m-{rng.randrange(sends)}",
            "occurred_at": (base + timedelta(seconds=rng.randrange(86_400))).isoformat(),
        }
        if kind == "bounced":
            document["bounce"] = rng.choice(("hard", "soft", "soft"))
        unique.append(json.dumps(document).encode())
    bodies = unique + rng.sample(unique, count - len(unique))
    rng.shuffle(bodies)
    return bodies


async def drive(url: str, bodies: list[bytes], concurrency: int) -> float:
    """Events per second over the whole batch."""
    now = int(time.time())
    signed = [(body, signature_header(SECRET, PATH, body, now)) for body in bodies]
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(body: bytes, header: str) -> None:
            async with (
                gate,
                session.post(url, data=body, headers={"Mailbus-Signature": header}) as response,
            ):
                await response.read()
                if response.status not in (200, 202):
                    raise RuntimeError(f"HTTP {response.status}")

        started = time.perf_counter()
        await asyncio.gather(*(one(body, header) for body, header in signed))
        return len(signed) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    admin_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    dbname = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    url = admin_url.rsplit("/", 1)[0] + f"/{dbname}"
    try:
        apply_migrations(url)
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, status, message_id)"
                " SELECT 'k-' || n, 'User' || n || '@Example.com', 't', 'accepted', 'm-' || n"
                " FROM generate_series(0, %s - 1) AS n",
                (args.sends,),
            )
        env = {
            **os.environ,
            "MAILBUS_DATABASE_URL": url,
            "MAILBUS_WEBHOOK_SECRET": SECRET,
            "MAILBUS_LOG_LEVEL": "WARNING",
        }
        listening = serving(
            ["mailbus", "webhooks"], "/readyz", env=env, listen_variable="MAILBUS_WEBHOOK_LISTEN"
        )
        with listening as base_url:
            endpoint = base_url + PATH
            rng = random.Random(7)
            rates = []
            for run in range(args.runs):
                bodies = make_events(run, args.sends, args.events, rng)
                rate = asyncio.run(drive(endpoint, bodies, args.concurrency))
                rates.append(rate)
                record(f"webhook events/s at {args.concurrency} in flight", rate, "events/s")
                print(f"run {run + 1}: {len(bodies)} events, {rate:,.0f} events/s", flush=True)
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT count(*) FROM delivery_events").fetchone()
        print(f"stored events: {stored[0] if stored else 0} (20% of requests were duplicates)")
        print(
            f"webhook events/s, one process, {args.concurrency} in flight:"
            f" min {min(rates):,.0f} / median {statistics.median(rates):,.0f}"
            f" / max {max(rates):,.0f}"
        )
    finally:
        drop_database(admin_url, dbname)


if __name__ == "__main__":
    main()
