"""The intake's writer through a real transaction-pooling PgBouncer (docs/guides/pgbouncer.md):
with MAILBUS_DATABASE_TRANSACTION_POOLING its connection prepares no statement, so batches
keep landing however the pooler hands out server sessions. Two writers (two intake
processes) take turns: one writes rows, the other dead letters."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from pgbouncer import PgBouncer

from mailbus.intake.dead_letters import IntakeDeadLetter
from mailbus.intake.events import NewRow
from mailbus.intake.rows import RowWriter, letters_documents, rows_document
from mailbus.kernel.errors import MailbusError

ROUNDS = 8  # more than psycopg's prepare_threshold (5) executions of each statement
MAX_AGE_S = 3 * 24 * 3600.0


def row(n: int) -> NewRow:
    return NewRow(
        f"order-{n}-confirmation",
        f"c{n}@example.com",
        "order_confirmation",
        "{}",
        "p1",
        None,
        "OrderPlaced",
    )


def letter(n: int) -> IntakeDeadLetter:
    return IntakeDeadLetter("undecodable", "not Avro", "orders.events", 0, n, b"k", b"\x00")


async def take_turns(url: str, transaction_pooling: bool) -> None:
    rows = RowWriter(url, MAX_AGE_S, transaction_pooling)
    letters = RowWriter(url, MAX_AGE_S, transaction_pooling)
    try:
        for n in range(ROUNDS):
            assert await rows.insert(rows_document([row(n)]), []) == (1, 0)
            await letters.insert(None, letters_documents([letter(n)]))
    finally:
        await rows.close()
        await letters.close()


def test_the_intake_writes_through_transaction_pooling(
    database_url: str, pgbouncer: PgBouncer
) -> None:
    asyncio.run(take_turns(pgbouncer.url, transaction_pooling=True))
    with psycopg.connect(database_url) as conn:
        [(sends,)] = conn.execute("SELECT count(*) FROM email_sends").fetchall()
        [(letters,)] = conn.execute("SELECT count(*) FROM email_dead_letters").fetchall()
    assert (sends, letters) == (ROUNDS, ROUNDS)


def test_without_the_setting_its_statements_fail_through_transaction_pooling(
    pgbouncer: PgBouncer,
) -> None:
    with pytest.raises(MailbusError, match="prepared statement"):
        asyncio.run(take_turns(pgbouncer.url, transaction_pooling=False))
