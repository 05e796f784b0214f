"""A provider's event that proves it took a mail (SendGrid, Mailgun: neither has a key nor
a look-up) and carries the send's key, arriving before the send is `unknown`: while the
consumer's call is still in flight (`sending`), or with a resend already scheduled
(`pending`). It is never lost: a `pending` send that was tried is settled at once, a
`sending` one by the receiver's sweep once its call has ended without a known outcome.
Run as the `mailbus_webhooks` role (migration 0065's grants)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import psycopg
import pytest
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.store import EventStore


def insert(database_url: str, key: str, status: str, attempts: int) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
            " first_tried_at, guarantee)"
            " VALUES (%s, 'ana@example.com', 't', %s, %s,"
            "         CASE WHEN %s > 0 THEN now() END, 'at_most_once')",
            (key, status, attempts, attempts),
        )


def sends(database_url: str) -> dict[str, tuple[str, str | None]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT dedupe_key, status, message_id FROM email_sends").fetchall()
    return {key: (status, message_id) for key, status, message_id in rows}


def delivered(key: str) -> DeliveryEvent:
    return DeliveryEvent(f"ev-{key}", "delivered", f"sg-{key}", datetime.now(UTC), dedupe_key=key)


@pytest.fixture
def webhooks_url(database_url: str) -> object:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_webhooks") as url:
        yield url


def test_an_event_before_the_send_is_unknown_settles_it_once_it_applies(
    database_url: str, webhooks_url: str
) -> None:
    insert(database_url, "in-flight", "sending", 1)
    insert(database_url, "resend-due", "pending", 1)  # at least once: a resend scheduled
    insert(database_url, "never-tried", "pending", 0)

    async def record_then_sweep() -> list[int]:
        store = EventStore(webhooks_url, max_connections=1, sent_through="sendgrid")
        await store.open()
        try:
            settled = [
                (await store.record("sendgrid", delivered(key))).settled
                for key in ("in-flight", "resend-due", "never-tried")
            ]
            await store.apply_late_events()  # the call is still in flight: nothing yet
            assert sends(database_url)["in-flight"] == ("sending", None)
            with psycopg.connect(database_url) as conn:  # the consumer's call times out
                conn.execute(
                    "UPDATE email_sends SET status = 'unknown' WHERE dedupe_key = 'in-flight'"
                )
            await store.apply_late_events()
            return settled
        finally:
            await store.close()

    assert asyncio.run(record_then_sweep()) == [0, 1, 0]
    assert sends(database_url) == {
        "in-flight": ("accepted", "sg-in-flight"),
        "resend-due": ("accepted", "sg-resend-due"),  # never sent a second time
        "never-tried": ("pending", None),  # no call of it was made: no event is its own
    }
    with psycopg.connect(database_url) as conn:
        applied = conn.execute(
            "SELECT event_id, matched FROM delivery_events ORDER BY event_id"
        ).fetchall()
    assert applied == [("ev-in-flight", True), ("ev-never-tried", False), ("ev-resend-due", True)]


def test_a_kept_event_of_an_earlier_key_prefix_leaves_the_sweep_running(
    database_url: str, webhooks_url: str
) -> None:
    """MAILBUS_PROVIDER_KEY_PREFIX set (a second deployment joined the account) while an
    event was kept under the key without it: the sweep goes on applying late events and
    pruning tokens; the kept event settles nothing (no key of this prefix names a send)."""
    insert(database_url, "late", "accepted", 1)
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET message_id = 'sg-late' WHERE dedupe_key = 'late'")

    async def scenario() -> None:
        before = EventStore(webhooks_url, max_connections=1, sent_through="sendgrid")
        await before.open()
        try:
            await before.record("sendgrid", delivered("kept-before"))  # no send yet: kept
        finally:
            await before.close()
        after = EventStore(
            webhooks_url, max_connections=1, sent_through="sendgrid", key_prefix="eu:"
        )
        await after.open()
        try:
            with psycopg.connect(database_url) as conn:  # an event before its send's id
                conn.execute(
                    "INSERT INTO delivery_events (provider, event_id, type, message_id,"
                    " occurred_at, matched) VALUES ('sendgrid', 'ev-late', 'delivered',"
                    " 'sg-late', now(), false)"
                )
            late = await after.apply_late_events()
            assert late.applied == 1
        finally:
            await after.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT event_id, matched FROM delivery_events ORDER BY 1").fetchall()
    assert rows == [("ev-kept-before", False), ("ev-late", True)]
