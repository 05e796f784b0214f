"""Helpers of the ledger's integration tests: rows seeded by SQL, a ledger for one scenario."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg

from mailbus.consumer.core.suppression import stops
from mailbus.consumer.ledger import MessageOrigin, SendLedger
from mailbus_client.policies import configured_policy_book

__all__ = ["ORIGIN", "claim", "rows", "seed", "suppressed_at_load", "with_ledger"]

ORIGIN = MessageOrigin("mailbus.send.p1", 0, 42)


def seed(database_url: str, count: int) -> list[int]:
    with psycopg.connect(database_url) as conn:
        return [
            row_id
            for (row_id,) in conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " SELECT 'batch-' || n, 'u' || n || '@example.com', 'welcome'"
                " FROM generate_series(1, %s) n RETURNING id",
                (count,),
            )
        ]


def rows(database_url: str) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return {
            row[0]: row[1:]
            for row in conn.execute("SELECT id, status, attempts, message_id FROM email_sends")
        }


def with_ledger(database_url: str, scenario: Any, lease_s: float = 30) -> Any:
    async def main() -> Any:
        ledger = SendLedger(database_url, max_connections=4, lease_s=lease_s)
        await ledger.open()
        try:
            return await scenario(ledger)
        finally:
            await ledger.close()

    return asyncio.run(main())


async def claim(
    ledger: SendLedger,
    send_id: int,
    attempt: int,
    provider: str | None,
    token: uuid.UUID | None = None,
) -> uuid.UUID | None:
    """Claim under ``token`` (a fresh one by default); the lease token, or None."""
    claimed = await ledger.claim_for_send(send_id, attempt, provider, token or uuid.uuid4())
    return None if claimed is None else claimed.token


def suppressed_at_load(database_url: str, send_ids: list[int]) -> dict[int, bool]:
    """Whether the consumer's own load finds each send stopped by a suppression of its
    address (the scope's rule, under the shipped policy book)."""
    book = configured_policy_book({})

    async def scenario(ledger: SendLedger) -> dict[int, bool]:
        loaded = await asyncio.gather(*(ledger.load(i) for i in send_ids))
        return {
            send.view.id: stops(
                send.suppression, send.campaign_id, book.for_template(send.view.template).name
            )
            for send in loaded
            if send is not None
        }

    return dict(with_ledger(database_url, scenario))
