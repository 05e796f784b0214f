"""Client and AsyncClient against real PostgreSQL: batches, scheduled mail, trace context,
status and cancel, inside the caller's transaction (the enqueuer role and the relay:
tests/integration/test_client_server.py)."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from mailbus_client import (
    AsyncClient,
    Client,
    ConfigError,
    EnqueueResult,
    QueueCap,
    QueueFullError,
    SendRequest,
)

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def rows(database_url: str, columns: str = "dedupe_key") -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(f"SELECT {columns} FROM email_sends ORDER BY id").fetchall()


def batch(count: int, prefix: str = "k-", **fields: Any) -> list[SendRequest]:
    return [
        SendRequest(f"{prefix}{n}", f"u{n}@example.com", "welcome", **fields) for n in range(count)
    ]


def test_enqueue_many_writes_new_keys_and_tells_which_were_new(database_url: str) -> None:
    client = Client()
    with psycopg.connect(database_url) as conn:
        before = client.enqueue(conn, SendRequest("k-1", "old@example.com", "welcome"))
        conn.commit()
        results = client.enqueue_many(
            conn, [*batch(3), SendRequest("k-0", "x@example.com", "welcome")]
        )
        conn.commit()
    assert [r.created for r in results] == [True, False, True, False]
    assert results[1] == EnqueueResult(before.send_id, False)
    assert results[3].send_id == results[0].send_id
    assert rows(database_url, "dedupe_key, to_address") == [
        ("k-1", "old@example.com"),
        ("k-0", "u0@example.com"),
        ("k-2", "u2@example.com"),
    ]


def test_enqueue_many_never_commits_and_a_rollback_leaves_nothing(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        assert Client().enqueue_many(conn, []) == []
        Client().enqueue_many(conn, batch(5))
        conn.rollback()
    assert rows(database_url) == []


def test_enqueue_many_of_one_key_from_many_transactions_makes_one_row(database_url: str) -> None:
    results: list[EnqueueResult] = []
    barrier = threading.Barrier(8)

    def insert() -> None:
        with psycopg.connect(database_url) as conn:
            barrier.wait()
            results.extend(Client().enqueue_many(conn, batch(20)))
            conn.commit()

    threads = [threading.Thread(target=insert) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.created for r in results) == 20
    assert len({r.send_id for r in results}) == 20
    assert len(rows(database_url)) == 20


def test_overlapping_batches_in_opposite_orders_do_not_deadlock(database_url: str) -> None:
    errors: list[Exception] = []
    barrier = threading.Barrier(2)
    keys = batch(400)

    def insert(requests: list[SendRequest]) -> None:
        try:
            with psycopg.connect(database_url) as conn:
                barrier.wait()
                Client().enqueue_many(conn, requests)
                conn.commit()
        except Exception as exc:  # a deadlock: PostgreSQL aborts one of the two
            errors.append(exc)

    threads = [threading.Thread(target=insert, args=(order,)) for order in (keys, keys[::-1])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(rows(database_url)) == 400


def test_enqueue_many_is_refused_whole_past_the_cap(database_url: str) -> None:
    client = Client(cap=QueueCap(10))
    with psycopg.connect(database_url) as conn:
        client.enqueue_many(conn, batch(5, prefix="a-"))
        with pytest.raises(QueueFullError) as error:
            client.enqueue_many(conn, batch(2, prefix="b-", priority="p2"))  # 5 + 2 > 6
        assert (error.value.priority, error.value.open_rows) == ("p2", 5)
        client.enqueue_many(conn, batch(5, prefix="c-", priority="p0"))  # 5 + 5 <= 10
        conn.commit()
    assert len(rows(database_url)) == 10


def test_enqueue_many_of_keys_already_in_is_a_no_op_even_past_the_cap(database_url: str) -> None:
    """As ``enqueue``: a key already in the table is a no-op past the cap, not a refusal
    (a retry of a batch that went in, or its retry of keys another transaction committed
    meanwhile, raised QueueFullError with the first rows written)."""
    client = Client(cap=QueueCap(10))
    with psycopg.connect(database_url) as conn:
        first = client.enqueue_many(conn, batch(7, prefix="a-", priority="p0"))
        again = client.enqueue_many(conn, batch(2, prefix="a-", priority="p2"))  # 7 > 6
        assert client.enqueue(conn, batch(1, prefix="a-", priority="p2")[0]).created is False
        with pytest.raises(QueueFullError):
            client.enqueue_many(
                conn, batch(1, prefix="a-", priority="p2") + batch(1, prefix="b-", priority="p2")
            )
    assert again == [EnqueueResult(first[0].send_id, False), EnqueueResult(first[1].send_id, False)]


def test_send_at_and_a_delay_set_next_try_at_and_the_expiry_follows(database_url: str) -> None:
    at = datetime(2031, 5, 1, 8, tzinfo=UTC)
    with psycopg.connect(database_url) as conn:
        Client().enqueue_many(
            conn,
            [
                SendRequest("at", "a@example.com", "password_reset", send_at=at),
                SendRequest("later", "b@example.com", "password_reset", send_at=timedelta(hours=2)),
            ],
        )
        Client().enqueue(conn, SendRequest("one", "c@example.com", "welcome", send_at=at))
        conn.commit()
        found = conn.execute(
            "SELECT dedupe_key, next_try_at - created_at, expires_at - next_try_at, next_try_at"
            " FROM email_sends ORDER BY id"
        ).fetchall()
    assert found[0][2:] == (timedelta(minutes=15), at)
    assert found[1][1:3] == (timedelta(hours=2), timedelta(minutes=15))
    assert found[2][3] == at


def test_the_trace_context_of_the_current_span_or_the_given_one(database_url: str) -> None:
    trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
    client = Client()
    with psycopg.connect(database_url) as conn:
        client.enqueue(conn, SendRequest("none", "a@example.com", "welcome"))
        with trace_sdk.TracerProvider().get_tracer("shop").start_as_current_span("ship") as span:
            client.enqueue_many(conn, batch(2))
            client.enqueue(
                conn, SendRequest("given", "b@example.com", "welcome", traceparent=PARENT)
            )
        Client(trace=False).enqueue(conn, SendRequest("off", "c@example.com", "welcome"))
        conn.commit()
    trace_id = f"{span.get_span_context().trace_id:032x}"
    found = dict(rows(database_url, "dedupe_key, traceparent"))
    assert found["none"] is None and found["off"] is None
    assert found["k-0"].split("-")[1] == found["k-1"].split("-")[1] == trace_id
    assert found["given"] == PARENT


def test_status_and_cancel(database_url: str) -> None:
    client = Client()
    with psycopg.connect(database_url) as conn:
        client.enqueue_many(conn, batch(3))
        conn.execute("UPDATE email_sends SET attempts = 1 WHERE dedupe_key = 'k-1'")
        conn.execute("UPDATE email_sends SET status = 'sending' WHERE dedupe_key = 'k-2'")
        assert client.status(conn, "missing") is None
        assert client.cancel(conn, "k-0", by="shop")
        assert not client.cancel(conn, "k-0")  # expired now
        assert not client.cancel(conn, "k-1")  # tried: the provider's to tell
        assert not client.cancel(conn, "k-2")  # claimed
        assert not client.cancel(conn, "missing")
        status = client.status(conn, "k-0")
        conn.commit()
        audit = conn.execute(
            "SELECT action, from_status, resolved_by FROM email_send_resolutions"
        ).fetchall()
    assert status is not None and (status.status, status.attempts) == ("expired", 0)
    assert status.expires_at is not None and status.message_id is None
    assert audit == [("cancelled", "pending", "shop")]


def test_the_async_client_does_the_same_in_the_callers_transaction(database_url: str) -> None:
    async def work() -> tuple[list[EnqueueResult], bool, str | None]:
        client = AsyncClient()
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            async with conn.transaction():
                await client.enqueue(conn, SendRequest("one", "a@example.com", "welcome"))
                results = await client.enqueue_many(conn, batch(3))
                assert await client.enqueue_many(conn, []) == []
            async with conn.transaction():
                cancelled = await client.cancel(conn, "k-2")
                status = await client.status(conn, "k-2")
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await client.enqueue(conn, SendRequest("rolled", "b@example.com", "welcome"))
                    raise RuntimeError("the business change failed")
        return results, cancelled, status.status if status else None

    results, cancelled, status = asyncio.run(work())
    assert [r.created for r in results] == [True, True, True]
    assert cancelled and status == "expired"
    assert [r[0] for r in rows(database_url)] == ["one", "k-0", "k-1", "k-2"]


def test_configuration_is_read_once_never_per_call(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = Client.from_environ(
        {"MAILBUS_QUEUE_CAP": "10", "MAILBUS_QUEUE_CAP_SHARES": "0.5,0.8,1.0"}
    )
    assert configured.cap == QueueCap(10, (0.5, 0.8, 1.0))
    with pytest.raises(ConfigError) as error:
        Client.from_environ({"MAILBUS_QUEUE_CAP": "many"})
    assert error.value.setting == "MAILBUS_QUEUE_CAP"
    client = Client()
    monkeypatch.setenv("MAILBUS_QUEUE_CAP", "1")  # after the client was built: not read
    with psycopg.connect(database_url) as conn:
        client.enqueue_many(conn, batch(3))
        client.enqueue(conn, SendRequest("one-more", "a@example.com", "welcome"))
        conn.commit()
    assert len(rows(database_url)) == 4
