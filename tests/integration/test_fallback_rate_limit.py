"""The fallback's own rate limit (MAILBUS_FALLBACK_RATE_LIMIT): another provider's quota,
so its calls draw from a bucket of their own in ``rate_limits``, never from the primary's
(MAILBUS_RATE_LIMIT), which they would otherwise spend or ignore."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import psycopg

from mailbus.consumer.runner import _fallback_gate
from mailbus.kernel.settings import Settings, load_settings


def buckets(database_url: str) -> dict[str, float]:
    with psycopg.connect(database_url) as conn:
        return dict(conn.execute("SELECT name, rate FROM rate_limits").fetchall())


def test_the_fallbacks_calls_draw_from_a_bucket_of_their_own(database_url: str) -> None:
    env = {
        "MAILBUS_FALLBACK_PROVIDER": "http",
        "MAILBUS_FALLBACK_PROVIDER_URL": "http://127.0.0.1:9",
    }
    settings: Settings = replace(
        load_settings({**env, "MAILBUS_RATE_LIMIT": "40", "MAILBUS_FALLBACK_RATE_LIMIT": "5"}),
        database_url=database_url,
    )
    gate = _fallback_gate(settings, lambda _state: None)

    async def admit_three() -> None:
        try:
            for _ in range(3):
                admission = await gate.admit_send()
                assert admission is not None
                gate.release(admission)
        finally:
            await gate.close()

    asyncio.run(admit_three())
    assert buckets(database_url) == {"fallback": 5.0}  # the primary's "provider" untouched


def test_without_its_own_limit_the_fallback_is_unlimited_as_before(database_url: str) -> None:
    settings = replace(load_settings({"MAILBUS_RATE_LIMIT": "40"}), database_url=database_url)
    gate = _fallback_gate(settings, lambda _state: None)
    admission = asyncio.run(gate.admit_send())
    assert admission is not None
    assert buckets(database_url) == {}
