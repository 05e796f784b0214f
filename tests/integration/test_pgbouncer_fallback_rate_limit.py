"""The fallback's rate limiter (MAILBUS_FALLBACK_RATE_LIMIT) through a real
transaction-pooling PgBouncer (docs/guides/pgbouncer.md): with
MAILBUS_DATABASE_TRANSACTION_POOLING its connection prepares no statement, as the primary's
does. Two consumers' fallback gates take turns on the bucket, more times than psycopg's
prepare_threshold (5)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
from pgbouncer import PgBouncer

from mailbus.consumer.runner import _fallback_gate
from mailbus.kernel.settings import load_settings

ROUNDS = 8


def test_the_fallbacks_rate_limiter_takes_tokens_through_transaction_pooling(
    pgbouncer: PgBouncer, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "MAILBUS_FALLBACK_PROVIDER": "http",
        "MAILBUS_FALLBACK_PROVIDER_URL": "http://127.0.0.1:9",
        "MAILBUS_FALLBACK_RATE_LIMIT": "20",  # a token per take,
        "MAILBUS_DATABASE_TRANSACTION_POOLING": "true",
    }
    settings = replace(load_settings(env), database_url=pgbouncer.url)
    gates = [_fallback_gate(settings, lambda _state: None) for _ in range(2)]

    async def take_turns() -> None:
        try:
            for _ in range(ROUNDS):
                for gate in gates:
                    admission = await gate.admit_send()
                    assert admission is not None
                    gate.release(admission)
        finally:
            for gate in gates:
                await gate.close()

    with caplog.at_level(logging.WARNING, "mailbus.rate_limit"):
        asyncio.run(take_turns())
    assert [r.getMessage() for r in caplog.records] == []
