"""The client through a real transaction-pooling PgBouncer (docs/guides/pgbouncer.md): the
application's own transactions, on connections that prepare no statements, enqueue, read
and cancel mail as they do on PostgreSQL itself. Two connections take turns, each holding
its transaction open while the other runs one, so the pooler hands their transactions
to alternating server sessions (what a busy application does)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from pgbouncer import PgBouncer, running_pgbouncer

from mailbus_client import AsyncClient, Client, SendRequest

ROUNDS = 8  # more than psycopg's prepare_threshold (5) executions of each statement


def requests(round_: int, name: str) -> list[SendRequest]:
    return [
        SendRequest(f"{name}-{round_}-{n}", f"{name}{n}@example.com", "welcome") for n in range(3)
    ]


def keys_and_statuses(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        return dict(conn.execute("SELECT dedupe_key, status FROM email_sends").fetchall())


def expected(names: tuple[str, ...]) -> dict[str, str]:
    rows = {}
    for name in names:
        for round_ in range(ROUNDS):
            rows[f"{name}-one-{round_}"] = "expired"  # enqueued, then cancelled
            rows.update({r.dedupe_key: "pending" for r in requests(round_, name)})
    return rows


def business_round(client: Client, conn: psycopg.Connection[Any], name: str, round_: int) -> None:
    """One application transaction: enqueue, a batch, a status and a cancel."""
    key = f"{name}-one-{round_}"
    assert client.enqueue(conn, SendRequest(key, f"{name}@example.com", "welcome")).created
    assert all(r.created for r in client.enqueue_many(conn, requests(round_, name)))
    status = client.status(conn, key)
    assert status is not None and status.status == "pending"
    assert client.cancel(conn, key, by="shop")


def shop_and_reader(url: str, **connect: Any) -> None:
    """Two parts of an application: the shop's transactions enqueue and cancel; the other
    connection's read a status while the shop's is open, so the pooler hands each
    connection's transactions to alternating server sessions."""
    client = Client()
    with psycopg.connect(url, **connect) as shop, psycopg.connect(url, **connect) as reader:
        for round_ in range(ROUNDS):
            business_round(client, shop, "a", round_)  # its transaction stays open …
            client.status(reader, "a-one-0")  # … while this one runs
            shop.commit()
            reader.commit()
        with pytest.raises(RuntimeError), shop.transaction():  # a rollback leaves nothing
            client.enqueue(shop, SendRequest("rolled-back", "c@example.com", "welcome"))
            raise RuntimeError("the business change failed")


def test_the_client_works_in_application_transactions_through_transaction_pooling(
    database_url: str, pgbouncer: PgBouncer
) -> None:
    shop_and_reader(pgbouncer.url, prepare_threshold=None)
    assert keys_and_statuses(database_url) == expected(("a",))


def test_the_async_client_works_through_transaction_pooling(
    database_url: str, pgbouncer: PgBouncer
) -> None:
    client = AsyncClient()

    async def round_(conn: psycopg.AsyncConnection[Any], name: str, number: int) -> None:
        key = f"{name}-one-{number}"
        assert (
            await client.enqueue(conn, SendRequest(key, f"{name}@x.example", "welcome"))
        ).created
        results = await client.enqueue_many(conn, requests(number, name))
        assert all(r.created for r in results)
        status = await client.status(conn, key)
        assert status is not None and status.status == "pending"
        assert await client.cancel(conn, key, by="shop")

    async def work() -> None:
        connect = psycopg.AsyncConnection.connect
        async with (
            await connect(pgbouncer.url, prepare_threshold=None) as shop,
            await connect(pgbouncer.url, prepare_threshold=None) as reader,
        ):
            for number in range(ROUNDS):
                await round_(shop, "a", number)
                await client.status(reader, "a-one-0")
                await shop.commit()
                await reader.commit()

    asyncio.run(work())
    assert keys_and_statuses(database_url) == expected(("a",))


def test_connections_that_prepare_statements_fail_through_transaction_pooling(
    database_url: str, pgbouncer: PgBouncer
) -> None:
    """Why the guide tells the application to pass ``prepare_threshold=None``: psycopg's
    default prepares a statement after its fifth execution, in one server session, under a
    name every connection numbers alike (``_pg3_0``); the pooler runs the connection's next
    transaction in another session, where that name is unknown or another statement."""
    with pytest.raises(psycopg.errors.Error, match="prepared statement"):
        shop_and_reader(pgbouncer.url)


def test_pgbouncer_1_18_takes_startup_options_only_when_told_to_drop_them(
    database_url: str, tmp_path: Any
) -> None:
    """``options`` (how a libpq URL sets a session parameter such as search_path) is a
    startup parameter PgBouncer 1.18 refuses, unless ``ignore_startup_parameters`` names it;
    then it is dropped, never applied: a session parameter must come from the role
    (``ALTER ROLE … SET``) behind such a pooler."""
    options = "-c statement_timeout=1234"
    with (
        running_pgbouncer(database_url, tmp_path, ignore_startup_parameters="") as strict,
        pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"),
    ):
        psycopg.connect(strict.url, options=options).close()
    with (
        running_pgbouncer(database_url, tmp_path) as lenient,
        psycopg.connect(lenient.url, options=options) as conn,
    ):
        assert conn.execute("SHOW statement_timeout").fetchone() != ("1234ms",)


def test_a_session_set_reaches_the_next_client_through_transaction_pooling(
    pgbouncer: PgBouncer,
) -> None:
    """Why the relay refuses MAILBUS_DATABASE_TRANSACTION_POOLING: its connection's
    ``SET synchronous_commit = off`` would stay on the server session for whichever client
    the pooler hands it to next."""
    with (
        psycopg.connect(pgbouncer.url, autocommit=True) as relay,
        psycopg.connect(pgbouncer.url, autocommit=True) as other,
    ):
        relay.execute("SET synchronous_commit = off")
        assert other.execute("SHOW synchronous_commit").fetchone() == ("off",)
