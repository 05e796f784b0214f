"""A relay that idled on an empty outbox still claims a later backlog in batches of
MAILBUS_RELAY_BATCH_SIZE, and looks up its next retry in a few pages whatever the backlog.
Real PostgreSQL and Kafka.

An idle relay runs its claims again and again on an empty table; psycopg prepares them
after five runs and PostgreSQL then keeps a generic plan made for a table of no rows.
With the claim written as ``WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` that
plan re-ran the locking sub-select once per row of the table: the first claim after a
backlog arrived took every row in one transaction (the limit ignored) at a cost growing
with the square of the backlog, so a relay could hang on a large campaign's first minutes.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import psycopg
from relay_runner import relay_thread, wait_until

from mailbus.kernel.settings import Settings
from mailbus_client.sqlfiles import load_queries

BATCH = 100
BACKLOG = 3000
IDLE_S = 2.0  # about 40 idle passes at the poll interval below: every claim gets prepared


def test_an_idle_relay_claims_a_later_backlog_batch_by_batch(settings: Settings) -> None:
    settings = replace(settings, relay_batch_size=BATCH, relay_poll_interval=0.05)
    with relay_thread(settings) as relay:
        time.sleep(IDLE_S)  # the relay polls its empty tables
        assert relay.stats.batches == 0
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " SELECT 'plan-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
                " FROM generate_series(1, %s) n",
                (BACKLOG,),
            )

            def published() -> int:
                row = conn.execute(
                    "SELECT count(*) FROM email_sends WHERE published_at IS NOT NULL"
                ).fetchone()
                return int(row[0]) if row else 0

            wait_until(lambda: published() == BACKLOG, 120, "the backlog published")
        assert relay.stats.published == BACKLOG
        assert relay.stats.batches >= BACKLOG // BATCH  # no claim took more than its limit


def blocks_read(plan: dict[str, Any]) -> int:
    """Pages an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) plan's top node touched, its
    children's included."""
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


LOOKUP = load_queries("mailbus.relay", "queries.sql")["seconds_until_next_due"]
EVERY_PRIORITY = {
    "priorities": ["p0", "p1", "p2"],
    "claimable_after_s": [1.0, 0.0, 0.0],
    "since_claim_s": 1.0,
}
P0_ALONE = {"priorities": ["p0"], "claimable_after_s": [0.0], "since_claim_s": 1.0}


def looked_up(conn: psycopg.Connection[Any], params: dict[str, Any]) -> tuple[float | None, int]:
    """The look-up's answer, and the pages its plan read."""
    [(explained,)] = conn.execute(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {LOOKUP}", params
    ).fetchall()
    document = explained if isinstance(explained, list) else json.loads(explained)
    [(seconds,)] = conn.execute(LOOKUP, params).fetchall()
    return seconds, blocks_read(document[0]["Plan"])


def insert_rows(
    conn: psycopg.Connection[Any], prefix: str, rows: int, priority: str, next_try_at: str = "NULL"
) -> None:
    conn.execute(
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority, next_try_at)"
        f" SELECT %s || n, 'u' || n || '@example.com', 'welcome', %s, {next_try_at}"
        " FROM generate_series(1, %s) n",
        (prefix, priority, rows),
    )


def test_the_next_retrys_look_up_reads_a_few_pages_whatever_is_due(database_url: str) -> None:
    """Before migration 0078 the look-up walked every row due now (the relay's due index
    holds them all, of every priority; only the heap says which have a next_try_at): an
    idle P0 lane did that walk before each sleep while a campaign's backlog waited."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        insert_rows(conn, "due-", BACKLOG, "p2")
        insert_rows(conn, "retry-", 3, "p1", "now() + make_interval(secs => 60 * n)")
        conn.execute("VACUUM ANALYZE email_sends")
        seconds, pages = looked_up(conn, EVERY_PRIORITY)
    assert pages <= 8
    assert seconds is not None and 50 < seconds <= 60  # the earliest retry's, not a row due now


def test_the_look_up_reads_a_few_pages_with_many_retries_ahead_the_statistics_never_saw(
    database_url: str,
) -> None:
    """Reviewed: `min(next_try_at)` read every entry ahead when the statistics said few lay
    there (a campaign paused, or a storm of retries, since the last ANALYZE)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        insert_rows(conn, "retry-", 1, "p1", "now() + interval '1 minute'")
        conn.execute("VACUUM ANALYZE email_sends")
        insert_rows(conn, "held-", BACKLOG, "p2", "now() + interval '100 years'")
        insert_rows(conn, "storm-", BACKLOG, "p1", "now() + make_interval(secs => 60 + n)")
        seconds, pages = looked_up(conn, EVERY_PRIORITY)
    assert pages <= 12
    assert seconds is not None and 50 < seconds <= 60


def test_the_p0_lanes_look_up_sees_p0_retries_alone(database_url: str) -> None:
    """Reviewed: the P0 lane looked up every priority's retries, so each newsletter's retry
    coming due woke it for an empty claim."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        insert_rows(conn, "news-", BACKLOG, "p2", "now() + make_interval(secs => n)")
        conn.execute("VACUUM ANALYZE email_sends")
        assert looked_up(conn, P0_ALONE)[0] is None
        insert_rows(conn, "reset-", 1, "p0", "now() + interval '1 hour'")
        seconds, pages = looked_up(conn, P0_ALONE)
    assert pages <= 8
    assert seconds is not None and 3500 < seconds <= 3600
