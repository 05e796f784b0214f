"""What the outcome-event trigger costs each statement that changes sends (issue 37,
decision 2): the row-level trigger of schemas/sql/0015 against the statement-level one of
bench/alternatives/send_events_per_statement.sql (once migration 0067; not shipped, since
it measured costlier: docs/benchmarks/speed.md), swapped in turn on one scratch database.

    python3 bench/send_event_trigger.py [--rounds 15] [--rows 400000]

Needs the local PostgreSQL. Each round installs one trigger, then the other, and times
each statement below inside its own transaction (the COMMIT, whose WAL flush is the
disk's, not the trigger's, left out); the first of each statement after a swap warms the
function's plans and is not counted. Min and median per statement and trigger:

- the relay's mark of 2,000 rows (``published_at``: no event);
- a consumer's claim of 64 rows (pending → sending: no event);
- a settle of 64 rows and of 1 row (sending → accepted: one event each);
- an INSERT of one pending row (no event).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator

import psycopg
from harness import REPO
from results import record

from mailbus.app.migrate import apply_migrations
from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import load_settings

SQL = REPO / "schemas" / "sql"
_INSERT = "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES (%s, 'a@x.org', 't')"
# name -> (statement over %s = ids, rows, statement putting the rows where it starts)
STATEMENTS = {
    "mark 2,000 published": (
        "UPDATE email_sends SET published_at = now() WHERE id = ANY(%s)", 2000, None),
    "claim 64": ("UPDATE email_sends SET status = 'sending' WHERE id = ANY(%s)", 64, None),
    "settle 64": (
        "UPDATE email_sends SET status = 'accepted', message_id = 'm' WHERE id = ANY(%s)", 64,
        "UPDATE email_sends SET status = 'sending' WHERE id = ANY(%s)"),
    "settle 1": (
        "UPDATE email_sends SET status = 'accepted', message_id = 'm' WHERE id = ANY(%s)", 1,
        "UPDATE email_sends SET status = 'sending' WHERE id = ANY(%s)"),
    "insert 1": (_INSERT, 1, None),
}  # fmt: skip


def row_level_trigger() -> str:
    """0015's function and triggers, without its table."""
    text = (SQL / "0015_send_events.sql").read_text()
    return text[text.index("CREATE OR REPLACE FUNCTION mailbus_record_send_event") :]


def statement_level_trigger() -> str:
    return (REPO / "bench" / "alternatives" / "send_events_per_statement.sql").read_text()


def scratch_database(base_url: str) -> Iterator[str]:
    name = f"mailbus_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = base_url.rsplit("/", 1)[0] + f"/{name}"
        apply_migrations(url)
        yield url
    finally:
        drop_database(base_url, name)


def time_one(
    conn: psycopg.Connection, statement: tuple[str, int, str | None], ids: Iterator[int], key: str
) -> float:
    """ms the statement took on its next rows of ``ids`` (``key``: an INSERT's dedupe key)."""
    sql, rows, before = statement
    batch = [next(ids) for _ in range(rows)]  # StopIteration: --rows too few for --rounds
    if before is not None:
        conn.execute(before, (batch,))
    with conn.transaction():
        started = time.perf_counter()
        conn.execute(sql, (key,) if sql == _INSERT else (batch,))
        return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--rows", type=int, default=400_000)
    args = parser.parse_args()
    triggers = {"row-level": row_level_trigger(), "statement-level": statement_level_trigger()}
    taken: dict[tuple[str, str], list[float]] = {}
    for url in scratch_database(load_settings().database_url):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " SELECT 'k' || n, 'a@x.org', 't', 'p2' FROM generate_series(1, %s) n",
                (args.rows,),
            )
            conn.execute("VACUUM ANALYZE email_sends")
            ids = iter(range(1, args.rows + 1))
            for round_ in range(args.rounds):
                for trigger, ddl in triggers.items():
                    conn.execute(ddl.encode())
                    for warm in (True, False):
                        for name, statement in STATEMENTS.items():
                            took = time_one(conn, statement, ids, f"new-{round_}-{trigger}-{warm}")
                            if not warm:
                                taken.setdefault((name, trigger), []).append(took)
    for name in STATEMENTS:
        line = []
        for trigger in triggers:
            values = taken[(name, trigger)]
            record(f"{name} with the {trigger} event trigger", statistics.median(values), "ms")
            line.append(f"{trigger} min {min(values):.3f} median {statistics.median(values):.3f}")
        print(f"{name:>22}: " + " | ".join(line) + " ms")


if __name__ == "__main__":
    main()
