"""Retention at the issue's scale (docs/retention.md#figures): a year of settled mail in
``email_sends`` (``--large``, 10 M, one attempt each) against ``--small`` (100 k), and
`mailbus retention run`'s function dropping the oldest month of it, cycle after cycle.

Each table is built in a fresh migrated scratch database: ``--months`` months of settled
sends (``updated_at`` spread evenly and rising with ``n``, so a month's rows are together
on disk as when they were written month by month) plus one attempt
each, loaded with ``INSERT ... SELECT generate_series`` with the secondary indexes and the
attempts' foreign key dropped and rebuilt afterwards (and the outcome-event trigger off:
outcome events are pruned by the relay a day after they are on Kafka), then 2000 pending
sends, then ``VACUUM ANALYZE``. On the large table, each of ``--cycles`` cycles:

1. ``prune`` (consumer/retention.py, batches of ``--batch``) with a window one month
   shorter than the last, so exactly the oldest remaining month is past it: seconds, rows,
   WAL bytes (the cluster's, so an upper bound on a shared server), and the share of a
   batch's time its cascades to the attempts take (one batch under EXPLAIN ANALYZE, rolled
   back);
2. ``VACUUM`` of both tables (what autovacuum does between runs; timed), or with
   ``--no-vacuum`` nothing: autovacuum as the cluster's settings run it (their default
   thresholds wait for 20 % of a table to be dead);
3. a new month of settled sends and attempts inserted (the month that replaces it);
4. enqueue p99 and claim p99 (bench/retention.py), and table and index sizes after each step.

The report ends with the sends deleted per second (``prune``'s whole run: batches, the
count of what is left and the run's record) and the arithmetic against 5 M mails a day:
the hour's worth an hourly CronJob run must delete, and how much of its 50-minute budget
that takes.

The small table gets ``--cycles`` rounds of the same p99s. The scratch databases are
dropped at the end. Needs only PostgreSQL (``MAILBUS_DATABASE_URL`` of a role that may
create databases). Heavy: run it under ``flock /tmp/mailbus-heavy.lock``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from results import record  # noqa: E402
from retention import enqueue_and_claim_p99, scratch  # noqa: E402

from mailbus.app.migrate import apply_migrations  # noqa: E402
from mailbus.app.scratch_database import drop_database  # noqa: E402
from mailbus.consumer.retention import Windows, prune, set_floors  # noqa: E402

DAY_S = 86400.0
TABLES = ("email_sends", "email_attempts")
# Rows of month m (0 = newest) are m*30 .. m*30+29 days old; keys 'settled-<n>' as in
# bench/retention.py, so its enqueue samples hit duplicates.
SENDS = """
INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts, message_id,
                         provider, guarantee, created_at, updated_at, accepted_at, published_at)
SELECT 'settled-' || n, 'u' || n || '@example.com', 'newsletter', 'accepted', 1, 'm-' || n,
       'http', 'exactly_once', t, t, t, t
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n,
     LATERAL (SELECT now() - make_interval(days => %(age_days)s::int) - make_interval(
                secs => (%(last)s::bigint - n) * %(spread)s::float8 * 86400 / %(rows)s::bigint
             ) AS t) AS at
"""
ATTEMPTS = """
INSERT INTO email_attempts (send_id, attempt, outcome, status_code, latency_ms, at)
SELECT id, 1, 'accepted', 202, 40 + id %% 60, updated_at FROM email_sends
WHERE id > %(after_id)s
"""
PENDING = """
INSERT INTO email_sends (dedupe_key, to_address, template)
SELECT 'pending-' || n, 'p' || n || '@example.com', 'welcome' FROM generate_series(1, 2000) n
"""
EVENT_TRIGGER = "email_sends_record_event_insert"
SIZES = """
SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c
WHERE c.relname = ANY(%(tables)s) ORDER BY c.relname
"""


def sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Bytes on disk: ``<table> table`` (heap, TOAST, maps) and ``<table> indexes``."""
    found: dict[str, int] = {}
    for name, table, indexes in conn.execute(SIZES, {"tables": list(TABLES)}):
        found[f"{name} table"], found[f"{name} indexes"] = table, indexes
    return found


def add_months(
    conn: psycopg.Connection[Any], first: int, rows: int, age_days: int, spread_days: int
) -> float:
    """Insert settled sends ``first .. first+rows-1`` (ages ``age_days`` + up to
    ``spread_days``) and one attempt each; seconds taken."""
    started = time.perf_counter()
    [[after_id]] = conn.execute("SELECT coalesce(max(id), 0) FROM email_sends").fetchall()
    conn.execute(f"ALTER TABLE email_sends DISABLE TRIGGER {EVENT_TRIGGER}")
    conn.execute(
        SENDS,
        {
            "first": first,
            "last": first + rows - 1,
            "rows": rows,
            "age_days": age_days,
            "spread": spread_days,
        },
    )
    conn.execute(f"ALTER TABLE email_sends ENABLE TRIGGER {EVENT_TRIGGER}")
    conn.execute(ATTEMPTS, {"after_id": after_id})
    return time.perf_counter() - started


def build(url: str, rows: int, months: int) -> float:
    """A migrated database holding ``rows`` settled sends over ``months``; seconds taken."""
    started = time.perf_counter()
    apply_migrations(url)
    with psycopg.connect(url, autocommit=True) as conn:
        rebuild = [  # every secondary index and the constraints the load would check per row
            row[0]
            for row in conn.execute(
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indrelid"
                " WHERE c.relname = ANY(%(tables)s) AND NOT i.indisprimary"
                " AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
                {"tables": list(TABLES)},
            )
        ]
        for definition in rebuild:
            name = definition.split(" INDEX ", 1)[1].split(" ON ", 1)[0]
            conn.execute(f"DROP INDEX {name}")
        conn.execute("ALTER TABLE email_sends DROP CONSTRAINT email_sends_dedupe_key_key")
        conn.execute("ALTER TABLE email_attempts DROP CONSTRAINT email_attempts_send_id_fkey")
        conn.execute("SET maintenance_work_mem = '256MB'")
        add_months(conn, 1, rows, 0, 30 * months)
        conn.execute(
            "ALTER TABLE email_sends ADD CONSTRAINT email_sends_dedupe_key_key UNIQUE (dedupe_key)"
        )
        for definition in rebuild:
            conn.execute(definition)
        conn.execute(
            "ALTER TABLE email_attempts ADD CONSTRAINT email_attempts_send_id_fkey"
            " FOREIGN KEY (send_id) REFERENCES email_sends(id) ON DELETE CASCADE"
        )
        conn.execute(PENDING)
        conn.execute("VACUUM ANALYZE email_sends, email_attempts")
    return time.perf_counter() - started


def cascade_share(conn: psycopg.Connection[Any], window_s: float, batch: int) -> float:
    """The share of one prune batch's time spent in its ON DELETE CASCADE triggers (the
    attempts and resolutions going with their sends): EXPLAIN ANALYZE, rolled back, of the
    sends' delete of mailbus_prune (migration 0057; EXPLAIN does not see inside a function)."""
    with conn.transaction(force_rollback=True):
        conn.execute(
            "SELECT set_config('mailbus.retention_s', %(s)s, true)", {"s": str(window_s)}
        )
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) DELETE FROM email_sends s USING ("
            " SELECT id FROM email_sends_past_retention ORDER BY updated_at LIMIT %(batch)s"
            " FOR UPDATE SKIP LOCKED) doomed WHERE s.id = doomed.id",
            {"batch": batch},
        ).fetchall()
    triggers = sum(t["Time"] for t in plan[0].get("Triggers", []) if "RI_" in t["Trigger Name"])
    return float(triggers / plan[0]["Execution Time"])


def autovacuums(conn: psycopg.Connection[Any]) -> int:
    """How many times autovacuum has vacuumed the two tables."""
    [[count]] = conn.execute(
        "SELECT sum(autovacuum_count) FROM pg_stat_user_tables WHERE relname = ANY(%(tables)s)",
        {"tables": list(TABLES)},
    ).fetchall()
    return int(count)


def wal_lsn(conn: psycopg.Connection[Any]) -> int:
    [[lsn]] = conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchall()
    return int(lsn)


def cycles(
    url: str, rows: int, months: int, count: int, batch: int, samples: int, vacuum: bool
) -> tuple[list[dict[str, float]], list[tuple[str, dict[str, int]]]]:
    """``count`` cycles of drop-the-oldest-month, VACUUM (unless not ``vacuum``), insert a
    new month."""
    month = rows // months
    figures, trajectory = [], []
    next_key = rows + 1
    with psycopg.connect(url, autocommit=True) as conn:
        trajectory.append(("built", sizes(conn)))
        autovacuums_before = autovacuums(conn)
        for k in range(1, count + 1):
            window_s = (months - k) * 30 * DAY_S  # month months-k is now past it
            share = cascade_share(conn, window_s, batch)
            windows = Windows(*[window_s] * 4)
            set_floors(url, windows)  # as the operator pins them
            wal = wal_lsn(conn)
            started = time.perf_counter()
            [sends, *_], _ = prune(url, windows, batch=batch, budget_s=float("inf"))
            prune_s = time.perf_counter() - started
            wal = wal_lsn(conn) - wal
            trajectory.append((f"cycle {k}: month deleted", sizes(conn)))
            started = time.perf_counter()
            if vacuum:
                conn.execute("VACUUM email_sends, email_attempts")
                trajectory.append((f"cycle {k}: vacuumed", sizes(conn)))
            vacuum_s = time.perf_counter() - started
            insert_s = add_months(conn, next_key, month, 0, 30)
            next_key += month
            conn.execute("ANALYZE email_sends, email_attempts")
            trajectory.append((f"cycle {k}: new month inserted", sizes(conn)))
            figures.append(
                {
                    "month_rows": sends.rows,
                    "prune_s": prune_s,
                    "sends_per_s": sends.rows / prune_s,  # each with its attempt
                    "batches": sends.batches,
                    "prune_wal_mb": wal / 2**20,
                    "cascade_share": share,
                    "vacuum_s": vacuum_s,
                    "insert_month_s": insert_s,
                    "autovacuums_so_far": autovacuums(conn) - autovacuums_before,
                }
                | enqueue_and_claim_p99(conn, rows, samples, tag=f"c{k}")
            )
            print(f"large cycle {k}: {figures[-1]}", flush=True)
            for step, measured in trajectory:
                if step.startswith(f"cycle {k}:"):
                    print(f"{step}: {sized(measured)}", flush=True)
    return figures, trajectory


def sized(measured: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in measured.items())


def spread(label: str, runs: list[dict[str, float]]) -> list[str]:
    """`label figure: min / median / max` lines, one per figure."""
    lines = []
    for key in runs[0]:
        values = [run[key] for run in runs]
        lines.append(
            f"{label} {key}: {min(values):.3f} / {statistics.median(values):.3f} /"
            f" {max(values):.3f}"
        )
        record(
            f"retention scale {label} {key} median",
            statistics.median(values),
            key.rsplit("_", 1)[-1],
        )
    return lines


def keeping_pace(rates: list[float], per_day: int = 5_000_000) -> list[str]:
    """The arithmetic against ``per_day`` mails a day: the hour's worth an hourly run must
    delete, and the time that takes at the slowest, median and fastest measured rate
    (against the CronJob's --budget of 50 minutes)."""
    hour = per_day / 24
    lines = [f"keeping pace with {per_day:,} mails a day: {hour:,.0f} sends an hour to delete"]
    for label, rate in (
        ("slowest", min(rates)),
        ("median", statistics.median(rates)),
        ("fastest", max(rates)),
    ):
        lines.append(
            f"  {label} {rate:,.0f} sends/s: an hour's worth in {hour / rate:,.0f} s"
            f" ({hour / rate / 3000:.1%} of a 50 m budget); {rate * 86400 / per_day:.1f}x"
            " the daily inflow"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--no-vacuum", action="store_true", help="leave it to autovacuum")
    args = parser.parse_args()
    base = os.environ.get("MAILBUS_DATABASE_URL", "postgresql://localhost/mailbus")
    report = []

    name, url = scratch(base)
    try:
        build(url, args.small, args.months)
        with psycopg.connect(url, autocommit=True) as conn:
            small = [
                enqueue_and_claim_p99(conn, args.small, args.samples, tag=f"r{r}")
                for r in range(args.cycles)
            ]
    finally:
        drop_database(base, name)
    report += spread(f"small ({args.small})", small)

    name, url = scratch(base)
    try:
        build_s = build(url, args.large, args.months)
        print(f"large: built in {build_s:.0f} s", flush=True)
        large, trajectory = cycles(
            url,
            args.large,
            args.months,
            args.cycles,
            args.batch,
            args.samples,
            not args.no_vacuum,
        )
    finally:
        drop_database(base, name)
    report += spread(f"large ({args.large})", large)
    report.append(f"large: built in {build_s:.0f} s")
    report += keeping_pace([run["sends_per_s"] for run in large])
    for step, measured in trajectory:
        report.append(f"{step}: {sized(measured)}")
    print("\n".join(report))


if __name__ == "__main__":
    main()
