"""Retention benchmark (docs/retention.md): what a table full of settled mail costs the hot
path, what `mailbus retention run` costs, and what dropping a month partition would.

For each size (``--small`` and ``--large`` settled rows, spread over 120 days, in a fresh
migrated database), after VACUUM ANALYZE:

- enqueue p99: the contract's ``INSERT ... ON CONFLICT (dedupe_key) DO NOTHING``, one row
  per transaction, ``--samples`` times (half new keys, half duplicates of settled ones);
- claim p99: the relay's ``claim_due`` over 2000 pending rows (batches of 100, each rolled
  back so every sample sees the same table);
- one retention batch: seconds per batch of 1000 of ``prune`` with a 90-day window.

Then, on ``--large`` rows of an attempts-like table: deleting one month's worth in batches
of 1000 against ``DROP TABLE`` of the same month as a partition. Not run by the tests; needs
only PostgreSQL (``MAILBUS_DATABASE_URL`` of a role that may create databases).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from results import record  # noqa: E402

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402
from mailbus.consumer.retention import Windows, prune, set_floors  # noqa: E402
from mailbus_client.sqlfiles import load_queries  # noqa: E402

ENQUEUE = (
    "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
    " VALUES (%s, 'a@x.org', 't', '{}', 'p1') ON CONFLICT (dedupe_key) DO NOTHING"
)
SETTLED = """
INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts, message_id,
                         created_at, updated_at)
SELECT 'settled-' || n, 'u' || n || '@example.com', 'newsletter', 'accepted', 1, 'm-' || n,
       now() - (n %% 120) * interval '1 day', now() - (n %% 120) * interval '1 day'
FROM generate_series(1, %(n)s) AS n
"""
PENDING = """
INSERT INTO email_sends (dedupe_key, to_address, template)
SELECT 'pending-' || n, 'p' || n || '@example.com', 'welcome' FROM generate_series(1, 2000) n
"""
WINDOW_S = 90 * 86400.0


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] * 1000  # ms


def scratch(base_url: str) -> tuple[str, str]:
    name = f"mailbus_bench_retention_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = base_url.rsplit("/", 1)
    return name, f"{parts[0]}/{name}"


def enqueue_and_claim_p99(
    conn: psycopg.Connection[Any], settled: int, samples: int, tag: str = ""
) -> dict[str, float]:
    """Enqueue p99 (half new keys ``new-<tag>-<i>``, half duplicates of ``settled-<n>``) and
    claim p99 (``claim_due`` of 100, rolled back) on an autocommit connection."""
    enqueue = []
    for i in range(samples):
        key = f"new-{tag}-{i}" if i % 2 else f"settled-{(i * 7919) % settled + 1}"
        started = time.perf_counter()
        conn.execute(ENQUEUE, (key,))
        enqueue.append(time.perf_counter() - started)
    claim_due = load_queries("mailbus.relay", "queries.sql")["claim_due"]
    claim = []
    for _ in range(samples // 10):
        started = time.perf_counter()
        with conn.transaction(force_rollback=True):
            conn.execute(claim_due, {"limit": 100}).fetchall()
        claim.append(time.perf_counter() - started)
    return {"enqueue_p99_ms": p99(enqueue), "claim_p99_ms": p99(claim)}


def hot_path(url: str, settled: int, samples: int) -> dict[str, float]:
    apply_migrations(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SETTLED, {"n": settled})
        conn.execute(PENDING)
        conn.execute("VACUUM ANALYZE email_sends")
        figures = enqueue_and_claim_p99(conn, settled, samples)
    windows = Windows(*[WINDOW_S] * 4)
    set_floors(url, windows)  # the windows as the database's floors, as the operator pins them
    started = time.perf_counter()
    [sends, *_], _ = prune(url, windows, batch=1000, budget_s=0.0)
    batch_s = (time.perf_counter() - started) / max(sends.batches, 1)
    return figures | {"batch_s": batch_s}


def month_drop(url: str, rows: int) -> dict[str, float]:
    """One month of an attempts-like table: batched DELETE (flat) against DROP (partition)."""
    month = rows // 4  # four months of rows, the oldest one goes
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE flat (id bigint, at timestamptz, outcome text);"
            " CREATE INDEX ON flat (at);"
            " CREATE TABLE parted (id bigint, at timestamptz, outcome text)"
            " PARTITION BY RANGE (at)"
        )
        for m in range(4):
            conn.execute(
                f"CREATE TABLE parted_{m} PARTITION OF parted FOR VALUES FROM"
                f" ('2025-0{m + 1}-01') TO ('2025-0{m + 2}-01')"
            )
        fill = (
            "INSERT INTO {} SELECT n, timestamptz '2025-01-01' + (n %% 4) * interval '1 month'"
            " + (n %% 27) * interval '1 day', 'accepted' FROM generate_series(1, %(n)s) n"
        )
        conn.execute(fill.format("flat"), {"n": month * 4})
        conn.execute(fill.format("parted"), {"n": month * 4})
        conn.execute("VACUUM ANALYZE flat")
        conn.execute("VACUUM ANALYZE parted")
        started = time.perf_counter()
        while True:
            gone = conn.execute(
                "DELETE FROM flat WHERE ctid = ANY(ARRAY(SELECT ctid FROM flat"
                " WHERE at < '2025-02-01' LIMIT 1000))"
            ).rowcount
            if gone < 1000:
                break
        delete_s = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute("ALTER TABLE parted DETACH PARTITION parted_0")
        conn.execute("DROP TABLE parted_0")
        drop_s = time.perf_counter() - started
    return {"month_rows": month, "delete_s": delete_s, "drop_s": drop_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    base = os.environ.get("MAILBUS_DATABASE_URL", "postgresql://localhost/mailbus")
    for label, size in (("small", args.small), ("large", args.large)):
        name, url = scratch(base)
        try:
            figures = hot_path(url, size, args.samples)
            if label == "large":
                figures |= month_drop(url, size)
        finally:
            drop_database(base, name)
        print(
            f"{label} ({size} settled rows): "
            + ", ".join(f"{k} {v:.3f}" for k, v in figures.items())
        )
        for key, value in figures.items():
            record(f"retention {label} {key}", value, key.rsplit("_", 1)[-1])


if __name__ == "__main__":
    main()
