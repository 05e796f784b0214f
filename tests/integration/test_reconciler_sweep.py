"""The reconciler's safety net: long-published pending rows go back to the relay."""

from __future__ import annotations

import asyncio

import psycopg

from mailbus.consumer.ledger import SendLedger


def test_only_long_published_pending_rows_of_our_priorities_are_handed_back(
    database_url: str,
) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status,"
            " published_at) VALUES"
            " ('stale', 'a@example.com', 't', 'p1', 'pending', now() - interval '2 hours'),"
            " ('stale-2', 'a@example.com', 't', 'p1', 'pending', now() - interval '3 hours'),"
            " ('fresh', 'a@example.com', 't', 'p1', 'pending', now() - interval '1 minute'),"
            " ('p2-stale', 'a@example.com', 't', 'p2', 'pending', now() - interval '2 hours'),"
            " ('done', 'a@example.com', 't', 'p1', 'accepted', now() - interval '2 hours')"
        )

    async def sweep() -> list[int]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            first = await ledger.republish_stale(["p1"], after_s=3600, limit=1)
            second = await ledger.republish_stale(["p1"], after_s=3600, limit=1)
            third = await ledger.republish_stale(["p1"], after_s=3600, limit=1)
            return [first, second, third]
        finally:
            await ledger.close()

    assert asyncio.run(sweep()) == [1, 1, 0]  # bounded per pass, oldest first
    with psycopg.connect(database_url) as conn:
        unpublished = {
            key
            for (key,) in conn.execute(
                "SELECT dedupe_key FROM email_sends WHERE published_at IS NULL"
            )
        }
    assert unpublished == {"stale", "stale-2"}
