"""The client with the rest of mailbus on real PostgreSQL: the relay holds a scheduled row
until it is due, the least-privilege enqueuer role may do what the client does and nothing
more, and a batch reads only the rows it names whatever the table's size."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from relay_runner import wait_until
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.kernel.settings import Settings
from mailbus.relay.relay import Relay
from mailbus_client import Client, EnqueueResult, QueueCap, SendRequest
from mailbus_client.policies import configured_policy_book
from mailbus_client.steps import enqueue_many_steps

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def rows(database_url: str, columns: str = "dedupe_key") -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(f"SELECT {columns} FROM email_sends ORDER BY id").fetchall()


def batch(count: int, prefix: str = "k-", **fields: Any) -> list[SendRequest]:
    return [
        SendRequest(f"{prefix}{n}", f"u{n}@example.com", "welcome", **fields) for n in range(count)
    ]


def test_the_relay_publishes_a_scheduled_row_only_once_it_is_due(settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as conn:
        Client().enqueue(conn, SendRequest("now", "a@example.com", "welcome"))
        Client().enqueue(
            conn, SendRequest("soon", "b@example.com", "welcome", send_at=timedelta(seconds=2))
        )
        conn.commit()
    relay = Relay(settings)
    try:
        assert relay.publish_due_batch(threading.Event()) == 1
        assert rows(settings.database_url, "dedupe_key, published_at IS NOT NULL") == [
            ("now", True),
            ("soon", False),
        ]
        wait_until(
            lambda: rows(settings.database_url, "next_try_at <= now()")[1] == (True,), 30, "due"
        )
        assert relay.publish_due_batch(threading.Event()) == 1
    finally:
        relay.close()


def test_the_enqueuer_role_schedules_reads_status_and_cancels_and_nothing_more(
    database_url: str,
) -> None:
    apply_roles(database_url)
    client = Client(cap=QueueCap(1000))
    with login_as(database_url, "mailbus_enqueuer") as url, psycopg.connect(url) as conn:
        one = client.enqueue(
            conn, SendRequest("k-a", "a@example.com", "welcome", send_at=timedelta(hours=1))
        )
        many = client.enqueue_many(
            conn,
            [
                *batch(3, send_at=timedelta(minutes=5)),
                SendRequest("k-a", "a@example.com", "welcome"),
            ],
        )
        assert many[3] == EnqueueResult(one.send_id, False)
        assert client.cancel(conn, "k-0")
        status = client.status(conn, "k-0")
        assert status is not None and status.status == "expired"
        conn.commit()
        for statement in (
            "UPDATE email_sends SET status = 'pending'",
            "SELECT last_error FROM email_sends",
            "SELECT to_address FROM email_sends",
            "SELECT * FROM email_send_resolutions",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()
    assert len(rows(database_url)) == 4


def test_the_enqueuer_cannot_cancel_a_campaigns_mail_nor_sign_its_cancel_as_someone_else(
    database_url: str,
) -> None:
    """mailbus_cancel_send runs as the tables' owner for any key: an enqueuer (any domain
    service) could stop a campaign's mail, which only the operator's `campaign cancel`
    may, and wrote whatever name it liked as the audit row's resolved_by. The operator
    still cancels a campaign's row by hand."""
    apply_roles(database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, campaign_id)"
            " VALUES ('camp-1', 'a@example.com', 'newsletter', 7),"
            " ('camp-2', 'b@example.com', 'newsletter', 7)"
        )
    client = Client()
    with login_as(database_url, "mailbus_enqueuer") as url, psycopg.connect(url) as conn:
        client.enqueue(conn, SendRequest("own", "c@example.com", "welcome"))
        assert not client.cancel(conn, "camp-1")
        assert client.cancel(conn, "own", by="ops-ana")
        login = conn.execute("SELECT session_user").fetchone()[0]  # type: ignore[index]
        conn.commit()
    with login_as(database_url, "mailbus_operator") as url, psycopg.connect(url) as conn:
        assert client.cancel(conn, "camp-2", by="ana")
        conn.commit()
    with psycopg.connect(database_url) as conn:
        audit = conn.execute(
            "SELECT s.dedupe_key, s.status, r.resolved_by FROM email_sends s"
            " LEFT JOIN email_send_resolutions r ON r.send_id = s.id ORDER BY s.dedupe_key"
        ).fetchall()
    assert audit == [
        ("camp-1", "pending", None),
        ("camp-2", "expired", "ana"),
        ("own", "expired", f"ops-ana (login {login})"),
    ]


def scanned_whole(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> set[str]:
    """The tables an EXPLAIN (FORMAT JSON) plan of ``sql`` reads by a sequential scan."""
    [(explained,)] = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    document = explained if isinstance(explained, list) else json.loads(explained)
    found, todo = set(), [document[0]["Plan"]]
    while todo:
        node = todo.pop()
        todo += node.get("Plans", [])
        if node["Node Type"] == "Seq Scan":
            found.add(node["Relation Name"])
    return found


@pytest.mark.parametrize("cap", [QueueCap(), QueueCap(10_000_000)])
def test_enqueue_many_probes_the_index_per_row_not_the_whole_table(
    database_url: str, cap: QueueCap
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status)"
            " SELECT 'old-' || n, 'u@example.com', 'welcome', 'accepted'"
            " FROM generate_series(1, 50000) n"
        )
        conn.execute("ANALYZE email_sends")
        requests = [*batch(2000), SendRequest("old-7", "u@example.com", "welcome")]
        flow = enqueue_many_steps(requests, configured_policy_book({}), cap, (None, None))
        statement = next(flow)
        assert scanned_whole(conn, statement.sql, statement.params) == set()
