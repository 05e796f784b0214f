"""A priority's own provider through the real service and ledger: its calls are recorded
under its name, and a row tried at another provider is never offered to it."""

from __future__ import annotations

import asyncio

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.ledger import SendLedger


def test_rows_keep_the_provider_that_first_took_them(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, attempts,"
            " provider, status) VALUES"
            " ('fresh', 'a@example.com', 'password_reset', 'p0', 0, NULL, 'pending'),"
            " ('tried-at-default', 'b@example.com', 'password_reset', 'p0', 1, NULL, 'pending')"
        )
        ids = dict(conn.execute("SELECT dedupe_key, id FROM email_sends").fetchall())
    transactional = ScriptedProvider(reply=lambda key: ProviderReply(200, f"tx-{key}"))

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            policy = RetryPolicy(max_attempts=5, base_s=1.0, cap_s=10.0)
            service = service_for(ledger, transactional, policy, provider_name="p0")
            await service.handle(origin_for(ids["fresh"], "fresh", 0, "p0"))
            await service.handle(origin_for(ids["tried-at-default"], "tried-at-default", 1, "p0"))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert transactional.sent == ["fresh"]  # never the row the default provider may hold
    with psycopg.connect(database_url) as conn:
        rows = {
            key: (status, provider, message_id, error)
            for key, status, provider, message_id, error in conn.execute(
                "SELECT dedupe_key, status, provider, message_id, last_error FROM email_sends"
            )
        }
    assert rows["fresh"][:3] == ("accepted", "p0", "tx-fresh")
    status, provider, _, error = rows["tried-at-default"]
    assert (status, provider) == ("pending", None)
    assert "tried at the default provider" in error
