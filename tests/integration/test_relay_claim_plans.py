"""A relay that idled on an empty outbox still claims a later backlog in batches of
MAILBUS_RELAY_BATCH_SIZE. Real PostgreSQL and Kafka.

An idle relay runs its claims again and again on an empty table; psycopg prepares them
after five runs and PostgreSQL then keeps a generic plan made for a table of no rows.
With the claim written as ``WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` that
plan re-ran the locking sub-select once per row of the table: the first claim after a
backlog arrived took every row in one transaction (the limit ignored) at a cost growing
with the square of the backlog, so a relay could hang on a large campaign's first minutes.
"""

from __future__ import annotations

import time
from dataclasses import replace

import psycopg
from relay_runner import relay_thread, wait_until

from mailbus.kernel.settings import Settings

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
