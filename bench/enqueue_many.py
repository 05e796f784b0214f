"""Client benchmark: rows/s enqueued by mailbus_client, ``enqueue`` in a loop against one
``enqueue_many`` call, on a ``psycopg.Connection`` and on a ``psycopg.AsyncConnection``.

Each run gets a fresh migrated database and, per way, a table emptied beforehand; the rows
(``--rows``, 10,000 by default) are enqueued in one transaction, timed from the first call
to the commit, then counted. The loop pays one round trip per row, the batch one for all.
Three runs by default; min / median / max printed. Needs only PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from results import record  # noqa: E402

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402
from mailbus_client import AsyncClient, Client, SendRequest  # noqa: E402


def requests(n: int) -> list[SendRequest]:
    return [
        SendRequest(f"bench-{i}", f"user{i}@example.com", "order_shipped", {"order": i})
        for i in range(n)
    ]


def sync_loop(url: str, batch: list[SendRequest]) -> None:
    client = Client()
    with psycopg.connect(url) as conn, conn.transaction():
        for request in batch:
            client.enqueue(conn, request)


def sync_many(url: str, batch: list[SendRequest]) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        Client().enqueue_many(conn, batch)


async def _async_loop(url: str, batch: list[SendRequest]) -> None:
    client = AsyncClient()
    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        for request in batch:
            await client.enqueue(conn, request)


async def _async_many(url: str, batch: list[SendRequest]) -> None:
    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        await AsyncClient().enqueue_many(conn, batch)


WAYS: dict[str, Callable[[str, list[SendRequest]], None]] = {
    "enqueue in a loop": sync_loop,
    "enqueue_many": sync_many,
    "async enqueue in a loop": lambda url, batch: asyncio.run(_async_loop(url, batch)),
    "async enqueue_many": lambda url, batch: asyncio.run(_async_many(url, batch)),
}


def timed(url: str, way: Callable[[str, list[SendRequest]], None], n: int) -> float:
    """Rows/s of ``way`` enqueueing ``n`` rows into an emptied table."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE email_sends CASCADE")
    batch = requests(n)
    started = time.perf_counter()
    way(url, batch)
    seconds = time.perf_counter() - started
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM email_sends").fetchone()
    if row is None or row[0] != n:
        raise RuntimeError(f"{row and row[0]} rows, expected {n}")
    return n / seconds


@contextlib.contextmanager
def fresh_database(base_url: str) -> Iterator[str]:
    dbname = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    url = base_url.rsplit("/", 1)[0] + f"/{dbname}"
    try:
        apply_migrations(url)
        yield url
    finally:
        drop_database(base_url, dbname)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base_url = os.environ.get(
        "MAILBUS_DATABASE_URL", "postgresql://mailbus:mailbus@127.0.0.1:5432/mailbus"
    )
    figures: dict[str, list[float]] = {name: [] for name in WAYS}
    for run in range(args.runs):
        with fresh_database(base_url) as url:
            for name, way in WAYS.items():
                rate = timed(url, way, args.rows)
                figures[name].append(rate)
                record(f"client rows/s, {name}", rate, "rows/s")
        print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in figures.items()))
    print(f"{args.rows:,} rows in one transaction, rows/s:")
    for name, values in figures.items():
        values = sorted(values)
        print(
            f"{name:<24} min {values[0]:>10,.0f}  median {statistics.median(values):>10,.0f}"
            f"  max {values[-1]:>10,.0f}"
        )


if __name__ == "__main__":
    main()
