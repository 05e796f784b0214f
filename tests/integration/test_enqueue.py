"""The enqueue helper against real PostgreSQL: dedupe, transactions, bad input."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import psycopg
import pytest

from mailbus.kernel.errors import InvalidSendError
from mailbus_client.enqueue import SendRequest, enqueue
from mailbus_client.send_request import MAX_PAYLOAD_BYTES


def _count(database_url: str, where: str = "true") -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(f"SELECT count(*) FROM email_sends WHERE {where}").fetchone()
        assert row is not None
        return int(row[0])


def test_fifty_concurrent_inserts_of_one_key_make_one_row(database_url: str) -> None:
    results = []
    barrier = threading.Barrier(50)

    def insert() -> None:
        with psycopg.connect(database_url) as conn:
            barrier.wait()
            result = enqueue(conn, SendRequest("order-1042-shipped", "ana@example.com", "shipped"))
            conn.commit()
            results.append(result)

    threads = [threading.Thread(target=insert) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 50
    assert sum(r.created for r in results) == 1
    assert len({r.send_id for r in results}) == 1
    assert _count(database_url) == 1


def test_rolled_back_business_transaction_leaves_no_row(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, state text)")
        conn.commit()
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1, 'placed')")
            enqueue(
                conn, SendRequest("order-1-confirmation", "ana@example.com", "order_confirmation")
            )
            raise RuntimeError("business rule failed after the enqueue")
        conn.commit()
    assert _count(database_url) == 0


def test_enqueue_stores_every_field(database_url: str) -> None:
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    with psycopg.connect(database_url) as conn:
        result = enqueue(
            conn,
            SendRequest(
                "reset-7", "bo@example.org", "password_reset", {"code": "123456"}, "p0", expires
            ),
        )
        conn.commit()
        row = conn.execute(
            "SELECT to_address, template, payload_json, priority, status, attempts, expires_at"
            " FROM email_sends WHERE id = %s",
            (result.send_id,),
        ).fetchone()
    assert row == (
        "bo@example.org",
        "password_reset",
        {"code": "123456"},
        "p0",
        "pending",
        0,
        expires,
    )


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"to_address": "not-an-address"}, "to_address"),
        ({"to_address": "ana@example.com\r\nBcc: all@example.com"}, "to_address"),
        ({"payload": {"subject": "Hi\r\nBcc: all@example.com"}}, "payload.subject"),
        ({"payload": {"blob": "x" * (MAX_PAYLOAD_BYTES + 1)}}, "payload"),
        ({"priority": "urgent"}, "priority"),
        ({"template": "Bad Template!"}, "template"),
        ({"dedupe_key": "has space"}, "dedupe_key"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    database_url: str, request_fields: dict[str, object], field: str
) -> None:
    fields: dict[str, object] = {
        "dedupe_key": "k-1",
        "to_address": "ana@example.com",
        "template": "welcome",
    }
    fields.update(request_fields)
    with psycopg.connect(database_url) as conn:
        with pytest.raises(InvalidSendError) as error:
            enqueue(conn, SendRequest(**fields))  # type: ignore[arg-type]
        conn.commit()
    assert error.value.field == field
    assert _count(database_url) == 0


def test_plain_sql_insert_is_a_valid_enqueue(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        for _ in range(2):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
                " VALUES ('k-sql', 'ana@example.com', 'welcome', '{}', 'p2')"
                " ON CONFLICT (dedupe_key) DO NOTHING"
            )
        conn.commit()
    assert _count(database_url, "status = 'pending' AND published_at IS NULL") == 1
