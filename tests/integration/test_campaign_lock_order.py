"""Every statement that waits for many send rows' locks takes them in id order, as the
consumer's claim does, so no two of them deadlock
(schemas/sql/0073_campaign_rows_locked_in_order.sql).

CI saw `campaign pause` abort with "deadlock detected" on a campaign whose mail was
retrying: the pause's UPDATE locked the rows in the heap's order, which updates reshuffle,
while a consumer's claim locked them in id order. Here the heap holds the higher id first
and a claim holds the lower one; each statement, started then, must wait for the lower one
holding no lock on the higher one, or the claim's next lock (the higher id) would close a
circle."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from lock_order import waits_holding_nothing_after
from test_campaigns import audience_csv, create

from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import transition
from mailbus_client.sqlfiles import load_queries

Rows = tuple[int, int]  # the campaign's two send ids, lower first


def higher_id_first_in_the_heap(conn: psycopg.Connection[Any], campaign_id: int) -> Rows:
    """The campaign's two rows written again, the higher id first: every scan of the
    campaign's rows (sequential, or by an index, whose equal keys are in heap order) meets
    the higher id first."""
    conn.execute(
        "WITH gone AS (DELETE FROM email_sends WHERE campaign_id = %s RETURNING *)"
        " INSERT INTO email_sends OVERRIDING SYSTEM VALUE SELECT * FROM gone ORDER BY id DESC",
        (campaign_id,),
    )
    in_heap = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM email_sends WHERE campaign_id = %s ORDER BY ctid", (campaign_id,)
        )
    ]
    assert len(in_heap) == 2 and in_heap[0] > in_heap[1]
    return in_heap[1], in_heap[0]


def pause(database_url: str, campaign_id: int, rows: Rows) -> int:
    return transition(database_url, campaign_id, "pause")[1]


def resume(database_url: str, campaign_id: int, rows: Rows) -> int:
    return transition(database_url, campaign_id, "resume")[1]


def consumer_settle(database_url: str, campaign_id: int, rows: Rows) -> int:
    """The consumer's settle of two decisions made before any call (both expired)."""
    decisions = [
        {"id": i, "attempt": 0, "token": None, "status": "expired", "last_error": "expired"}
        for i in reversed(rows)
    ]
    query = load_queries("mailbus.consumer", "queries.sql")["settle"]
    with psycopg.connect(database_url) as conn:
        return len(conn.execute(query, {"decisions": json.dumps(decisions)}).fetchall())


def webhook_settle(database_url: str, campaign_id: int, rows: Rows) -> int:
    """The webhooks settling two retrying sends the provider says it accepted."""
    with psycopg.connect(database_url) as conn:
        keys: dict[int, str] = dict(
            conn.execute("SELECT id, dedupe_key FROM email_sends WHERE id = ANY(%s)", (list(rows),))
        )
        settle = [
            {"provider": "sandbox", "dedupe_key": keys[i], "key": keys[i], "message_id": f"m-{i}"}
            for i in reversed(rows)
        ]
        query = load_queries("mailbus.feedback", "events.sql")["settle_from_events"]
        return len(conn.execute(query, {"settle": json.dumps(settle), "through": "{}"}).fetchall())


def campaign_of_two(database_url: str, mover: Callable[..., int]) -> tuple[int, Rows]:
    campaign_id = create(database_url, audience_csv(2), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    with psycopg.connect(database_url, autocommit=True) as conn:
        Pacer(database_url, max_batch=100).tick(conn, campaign_id)
        rows = higher_id_first_in_the_heap(conn, campaign_id)
        if mover is webhook_settle:  # tried once, answered with no known outcome
            conn.execute(
                "UPDATE email_sends SET attempts = 1 WHERE campaign_id = %s", (campaign_id,)
            )
    if mover is resume:
        transition(database_url, campaign_id, "pause")
    return campaign_id, rows


@pytest.mark.parametrize("mover", [pause, resume, consumer_settle, webhook_settle])
def test_a_statement_waiting_for_the_lower_id_holds_no_lock_on_the_higher(
    database_url: str, mover: Callable[[str, int, Rows], int]
) -> None:
    campaign_id, (lower, higher) = campaign_of_two(database_url, mover)
    lock = "SELECT id FROM email_sends WHERE id = {} FOR UPDATE"
    rows = waits_holding_nothing_after(  # a consumer's claim, which locks in id order
        database_url,
        lock.format(lower),
        lambda: mover(database_url, campaign_id, (lower, higher)),
        lock.format(higher),
    )
    assert rows == 2
