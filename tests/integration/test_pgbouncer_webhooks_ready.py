"""The webhooks receiver's own ``/readyz`` (feedback/store.py ``ready``) through a PgBouncer
whose every server session is busy: PgBouncer holds the statement until one is free (up to
its query_wait_timeout, 120 s), so a bound on the pool's checkout alone left the check
hanging. It answers "not ready" within its two seconds instead."""

from __future__ import annotations

import asyncio

import psycopg
from pgbouncer import PgBouncer

from mailbus.feedback.store import EventStore

POOL = 3  # the fixture's default_pool_size


def test_the_receivers_readiness_gives_up_while_every_server_session_is_busy(
    pgbouncer: PgBouncer,
) -> None:
    async def readiness() -> list[bool]:
        store = EventStore(pgbouncer.url, max_connections=1, transaction_pooling=True)
        await store.open()
        try:
            answers = [await store.ready()]
            busy = [await psycopg.AsyncConnection.connect(pgbouncer.url) for _ in range(POOL)]
            try:
                for session in busy:
                    await session.execute("SELECT 1")  # its transaction holds a server session
                answers.append(await asyncio.wait_for(store.ready(), 10))
            finally:
                for session in busy:
                    await session.close()
            answers.append(await asyncio.wait_for(store.ready(), 10))
            return answers
        finally:
            await store.close()

    assert asyncio.run(readiness()) == [True, False, True]
