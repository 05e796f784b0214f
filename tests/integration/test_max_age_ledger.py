"""MAILBUS_MAX_AGE against real PostgreSQL: the claim refuses a retry past it, and the
delivery service fails such a row with dead letter ``max_age`` only after a look-up."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for
from ledger_support import claim

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.ledger import SendLedger

DAY = 86400.0


def _insert(conn: psycopg.Connection[Any], key: str, age: str, attempts: int) -> int:
    (send_id,) = conn.execute(
        "INSERT INTO email_sends (dedupe_key, to_address, template, attempts, created_at)"
        " VALUES (%s, 'ada@example.com', 'order_confirmation', %s, now() - %s::interval)"
        " RETURNING id",
        (key, attempts, age),
    ).fetchone() or (0,)
    return int(send_id)


def test_a_retry_past_the_max_age_fails_with_a_max_age_dead_letter_after_a_look_up(
    database_url: str,
) -> None:
    with psycopg.connect(database_url) as conn:
        ids = {
            "old-tried": _insert(conn, "old-tried", "2 days", 1),
            "old-found": _insert(conn, "old-found", "2 days", 1),
            "nearly-old": _insert(conn, "nearly-old", "23 hours 59 minutes", 1),
            "old-untried": _insert(conn, "old-untried", "2 days", 0),
        }
    provider = ScriptedProvider({"old-found": "msg-earlier"})

    async def scenario() -> list[uuid.UUID | None]:
        ledger = SendLedger(database_url, max_connections=4, lease_s=30, max_age_s=DAY)
        await ledger.open()
        try:
            # The claim itself refuses a retry past the maximum age.
            refused = await claim(ledger, ids["old-tried"], 1, None)
            policy = RetryPolicy(max_attempts=50, base_s=60.0, cap_s=600.0, max_age_s=DAY)
            service = service_for(ledger, provider, policy)
            for key, send_id in ids.items():
                await service.handle(origin_for(send_id, key, 0 if key == "old-untried" else 1))
            return [refused]
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == [None]
    with psycopg.connect(database_url) as conn:
        status = dict(conn.execute("SELECT dedupe_key, status FROM email_sends").fetchall())
        letters = dict(
            conn.execute(
                "SELECT s.dedupe_key, d.reason FROM email_dead_letters d"
                " JOIN email_sends s ON s.id = d.send_id"
            ).fetchall()
        )
    assert status == {
        "old-tried": "failed",  # never sent again, failed once the provider said "not found"
        "old-found": "accepted",  # the provider had it: the table agrees
        "nearly-old": "failed",  # tried once more; its next retry would fall past the age
        "old-untried": "failed",  # its first call is made; the retry after its 503 is not
    }
    assert letters == {"old-tried": "max_age", "nearly-old": "max_age", "old-untried": "max_age"}
    assert provider.sent == ["nearly-old", "old-untried"]
    assert sorted(provider.looked_up) == ["nearly-old", "old-found", "old-tried"]


def test_the_claim_refuses_a_mail_past_the_max_age_whose_only_calls_were_refused(
    database_url: str,
) -> None:
    """A revoked key handed every call's attempt back (attempts 0), but the mail was claimed
    before (first_tried_at): past MAILBUS_MAX_AGE the claim refuses it, never claimed mail
    of the same age is claimed as a first try."""
    with psycopg.connect(database_url) as conn:
        held = _insert(conn, "held-by-a-revoked-key", "2 days", 0)
        fresh = _insert(conn, "never-claimed", "2 days", 0)
        conn.execute(
            "UPDATE email_sends SET first_tried_at = now() - interval '2 days' WHERE id = %s",
            (held,),
        )

    async def scenario() -> list[uuid.UUID | None]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30, max_age_s=DAY)
        await ledger.open()
        try:
            return [await claim(ledger, held, 0, None), await claim(ledger, fresh, 0, None)]
        finally:
            await ledger.close()

    refused, claimed = asyncio.run(scenario())
    assert refused is None and claimed is not None
