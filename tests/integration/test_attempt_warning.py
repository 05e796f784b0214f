"""mailbus_attempt_warnings_total counts a mail once, when its call is the
MAILBUS_ATTEMPT_WARNING-th attempt, by priority."""

from __future__ import annotations

import asyncio

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for
from prometheus_client import REGISTRY

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.ledger import SendLedger


def _warnings(priority: str) -> float:
    value = REGISTRY.get_sample_value("mailbus_attempt_warnings_total", {"priority": priority})
    return value or 0.0


def test_a_mail_counts_once_when_its_call_is_the_warning_attempt(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
            " VALUES ('retried', 'ada@example.com', 't', 'p0')"
        )
    provider = ScriptedProvider()  # 503 every time
    before = _warnings("p0"), _warnings("p1")

    async def scenario() -> list[float]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            policy = RetryPolicy(max_attempts=10, base_s=0.01, cap_s=0.01)
            service = service_for(ledger, provider, policy, attempt_warning=2)
            counts = []
            for attempt in range(4):
                with psycopg.connect(database_url) as conn:  # due again at once
                    conn.execute("UPDATE email_sends SET next_try_at = NULL")
                await service.handle(origin_for(1, "retried", attempt, "p0"))
                counts.append(_warnings("p0") - before[0])
            return counts
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == [0, 1, 1, 1]  # the 2nd call counts, and only it
    assert provider.sent == ["retried"] * 4
    assert _warnings("p1") == before[1]
