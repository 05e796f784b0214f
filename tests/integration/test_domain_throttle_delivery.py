"""Per-domain throttling through the real DeliveryService and ledger: a domain that answers
421 is paused, its next mail waits pending with no attempt spent, other domains are sent."""

from __future__ import annotations

import asyncio

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.core.smtp_outcome import SmtpReply
from mailbus.consumer.ledger import SendLedger


def reply(key: str) -> SmtpReply | ProviderReply:
    if key.startswith("slow"):
        return SmtpReply(421, "4.7.0 Try again later, too many messages from you", "rcpt")
    return ProviderReply(200, f"msg-{key}")


def test_a_domain_answering_421_slows_only_itself(database_url: str) -> None:
    keys = ["slow-1", "fast-1", "slow-2", "fast-2", "slow-3"]
    with psycopg.connect(database_url) as conn:
        ids = {
            key: conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, %s, 't') RETURNING id",
                (key, f"{key}@{key.split('-')[0]}.example"),
            ).fetchone()[0]  # type: ignore[index]
            for key in keys
        }
    provider = ScriptedProvider(reply=reply)  # type: ignore[arg-type]

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            policy = RetryPolicy(max_attempts=5, base_s=1.0, cap_s=10.0)
            service = service_for(ledger, provider, policy)
            for key in keys:
                await service.handle(origin_for(ids[key], key, 0))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert provider.sent == ["slow-1", "fast-1", "fast-2"]  # slow-2, slow-3: no call
    with psycopg.connect(database_url) as conn:
        rows = {
            key: (status, attempts, deferred, error)
            for key, status, attempts, deferred, error in conn.execute(
                "SELECT dedupe_key, status, attempts, next_try_at > now(), last_error"
                " FROM email_sends"
            )
        }
    assert rows["fast-1"][:2] == ("accepted", 1) and rows["fast-2"][:2] == ("accepted", 1)
    assert rows["slow-1"][:3] == ("pending", 1, True)  # its own retry, later
    for key in ("slow-2", "slow-3"):
        status, attempts, deferred, error = rows[key]
        assert (status, attempts, deferred) == ("pending", 0, True)
        assert "slow.example is throttling" in error
