"""Statements that take a batch as a JSON array read only the rows it names, whatever the
table's size: the consumer's claims and settle, the webhook receiver's record_events.
Real PostgreSQL.

PostgreSQL always guesses a ``jsonb_to_recordset`` at 100 rows. Joined to ``email_sends``
by id or message id, that guess made a hash join over a sequential scan of the whole
table the cheaper plan for any outbox of up to some tens of thousands of rows: two scans
per claim, one per settle and per webhook batch, each a few milliseconds at 10,000 rows,
for batches of about ten. Naming the keys in ``= ANY(ARRAY(…))`` lets an index find them,
so a statement costs what its rows cost.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from mailbus.consumer.core.decide import SEND_HEADROOM_S
from mailbus_client.sqlfiles import load_queries

ROWS = 10_000
BATCH = 12

QUERIES = load_queries("mailbus.consumer", "queries.sql")
WEBHOOKS = load_queries("mailbus.feedback", "events.sql")


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, its init plans and sub-plans included."""
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def tables_scanned_whole(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any]
) -> set[str]:
    [(explained,)] = conn.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchall()
    document = explained if isinstance(explained, list) else json.loads(explained)
    return {
        node["Relation Name"]
        for node in plan_nodes(document[0]["Plan"])
        if node["Node Type"] == "Seq Scan"
    }


@pytest.fixture
def outbox(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
            " SELECT 'plan-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
            " FROM generate_series(1, %s) n",
            (ROWS,),
        )
        conn.execute("ANALYZE email_sends")
        yield conn


def test_a_claim_reads_only_the_rows_it_names(outbox: psycopg.Connection[Any]) -> None:
    ids = [id_ for (id_,) in outbox.execute("SELECT id FROM email_sends LIMIT %s", (BATCH,))]
    claims = [
        {
            "id": id_,
            "attempt": 0,
            "token": str(uuid.uuid4()),
            "provider": None,
            "guarantee": "exactly_once",
            "resend_window_s": None,
        }
        for id_ in ids
    ]
    params = {
        "claims": Jsonb(claims),
        "lease_s": 60.0,
        "headroom_s": SEND_HEADROOM_S,
        "max_age_s": None,
    }
    assert "email_sends" not in tables_scanned_whole(outbox, QUERIES["claim_for_send"], params)


def test_a_first_attempts_claim_reads_only_the_rows_it_names(
    outbox: psycopg.Connection[Any],
) -> None:
    rows = outbox.execute("SELECT id, dedupe_key FROM email_sends LIMIT %s", (BATCH,))
    claims = [
        {
            "id": id_,
            "dedupe_key": key,
            "token": str(uuid.uuid4()),
            "provider": None,
            "provider_kind": "http",
            "guarantee": "exactly_once",
            "provider_key": key,
        }
        for id_, key in rows
    ]
    params = {"claims": Jsonb(claims), "lease_s": 60.0, "headroom_s": SEND_HEADROOM_S}
    assert "email_sends" not in tables_scanned_whole(outbox, QUERIES["claim_first_attempt"], params)


def test_a_settle_reads_only_the_rows_it_names(outbox: psycopg.Connection[Any]) -> None:
    ids = [id_ for (id_,) in outbox.execute("SELECT id FROM email_sends LIMIT %s", (BATCH,))]
    decisions = [
        {
            "id": id_,
            "attempt": 0,
            "token": None,
            "status": "expired",
            "next_try_at": None,
            "in_doubt_since": None,
            "last_error": "expired",
            "message_id": None,
            "latency_ms": None,
            "status_code": None,
            "provider_code": None,
            "dead_letter": False,
            "dl_reason": "invalid",
            "dl_error": "",
            "topic": None,
            "kafka_partition": None,
            "kafka_offset": None,
            "uncounted": False,
            "suppress_source": None,
            "unclaim": False,
            "guarantee": None,
        }
        for id_ in ids
    ]
    params = {"decisions": Jsonb(decisions)}
    assert "email_sends" not in tables_scanned_whole(outbox, QUERIES["settle"], params)


def test_a_webhook_batch_reads_only_the_sends_it_names(outbox: psycopg.Connection[Any]) -> None:
    outbox.execute("UPDATE email_sends SET status = 'accepted', message_id = 'msg-' || id")
    outbox.execute("ANALYZE email_sends")
    events = [
        {
            "n": n,
            "provider": "sandbox",
            "event_id": f"event-{n}",
            "type": "delivered",
            "bounce": None,
            "message_id": f"msg-{n + 1}",
            "occurred_at": "2026-12-04T18:00:00Z",
            "rank": 1,
            "suppress": False,
            "reason": None,
            "source": None,
        }
        for n in range(BATCH)
    ]
    params = {
        "events": json.dumps(events),
        "ranks": ["deferred", "delivered"],
        "through": json.dumps({"": "sendgrid"}),
        "named": ["ses", "sendgrid"],
    }
    assert "email_sends" not in tables_scanned_whole(outbox, WEBHOOKS["record_events"], params)
