"""The statements that wait for many rows' locks, beside those of
tests/integration/test_campaign_lock_order.py, take them in one order, so no two of them
deadlock: each, started while another transaction holds the row that comes first in that
order, waits for it holding no lock on a row that comes after it (the other transaction's
next lock, which would close a circle), or skips the rows another holds and waits for
none. The heap is made to hold the rows in the other order, which a statement locking in
the order its plan meets the rows would follow."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from lock_order import waits_holding_nothing_after
from services import StackServices, database_url_for
from transport_security import login_as

from mailbus.app.migrate import apply_migrations, apply_roles
from mailbus.app.scratch_database import drop_database
from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.store import EventStore
from mailbus.feedback.suppressions import import_file
from mailbus.intake.rows import RowWriter
from mailbus_client.sqlfiles import load_queries

Rows = tuple[int, int]  # two send ids, lower first


def two_sends_higher_id_first(database_url: str) -> Rows:
    """Two accepted sends (message ids m-<id>), written again higher id first: every scan
    of them meets the higher id first."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status)"
            " SELECT 'lock-' || n, 'u' || n || '@example.com', 't', 'accepted'"
            " FROM generate_series(1, 2) n"
        )
        conn.execute(
            "WITH gone AS (DELETE FROM email_sends RETURNING *)"
            " INSERT INTO email_sends OVERRIDING SYSTEM VALUE"
            " SELECT * FROM gone ORDER BY id DESC"
        )
        conn.execute("UPDATE email_sends SET message_id = 'm-' || id")  # in place: no reorder
        in_heap = [r[0] for r in conn.execute("SELECT id FROM email_sends ORDER BY ctid")]
    assert len(in_heap) == 2 and in_heap[0] > in_heap[1]
    return in_heap[1], in_heap[0]


def lock_send(id_: int) -> str:
    return f"SELECT id FROM email_sends WHERE id = {id_} FOR UPDATE"


@pytest.fixture
def webhooks_url(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_webhooks") as url:
        yield url


def delivered(id_: int) -> DeliveryEvent:
    return DeliveryEvent(f"ev-{id_}", "delivered", f"m-{id_}", datetime.now(UTC))


async def with_store(webhooks_url: str, use: Callable[[EventStore], Any]) -> Any:
    store = EventStore(webhooks_url, max_connections=1)
    await store.open()
    try:
        return await use(store)
    finally:
        await store.close()


def test_a_webhook_batch_waiting_for_the_lower_send_holds_no_lock_on_the_higher(
    database_url: str, webhooks_url: str
) -> None:
    """Two receivers (or a receiver and the late-events sweep) updating the same sends."""
    lower, higher = two_sends_higher_id_first(database_url)

    async def record(store: EventStore) -> list[int]:
        batch = [store.record("sandbox", delivered(i)) for i in (higher, lower)]
        return [r.updated for r in await asyncio.gather(*batch)]

    updated = waits_holding_nothing_after(
        database_url,
        lock_send(lower),
        lambda: asyncio.run(with_store(webhooks_url, record)),
        lock_send(higher),
    )
    assert updated == [1, 1]


def record_event(event_id: str) -> str:
    return (
        "INSERT INTO delivery_events (provider, event_id, type, message_id, occurred_at,"
        f" matched) VALUES ('sandbox', '{event_id}', 'delivered', 'm-x', now(), false)"
    )


def test_a_webhook_batch_inserts_its_events_in_the_keys_order(
    database_url: str, webhooks_url: str
) -> None:
    """Two receivers given one provider's retries of the same events in other orders: each
    waits (ON CONFLICT DO NOTHING too) for the other's uncommitted event unless both insert
    them in the key's order."""

    async def record(store: EventStore) -> list[bool]:
        events = [DeliveryEvent(e, "delivered", "m-x", datetime.now(UTC)) for e in ("ev-b", "ev-a")]
        batch = [store.record("sandbox", event) for event in events]
        return [r.new for r in await asyncio.gather(*batch)]

    new = waits_holding_nothing_after(
        database_url,
        record_event("ev-a"),
        lambda: asyncio.run(with_store(webhooks_url, record)),
        record_event("ev-b"),
    )
    assert new == [True, True]  # the holder rolled back: both are this batch's


def test_the_late_events_sweep_waiting_for_the_lower_send_holds_no_lock_on_the_higher(
    database_url: str, webhooks_url: str
) -> None:
    lower, higher = two_sends_higher_id_first(database_url)
    with psycopg.connect(database_url) as conn:  # came before their sends had a message id
        for i in (higher, lower):
            conn.execute(
                "INSERT INTO delivery_events (provider, event_id, type, message_id,"
                " occurred_at, matched) VALUES ('sandbox', %s, 'delivered', %s, now(), false)",
                (f"ev-{i}", f"m-{i}"),
            )

    async def sweep(store: EventStore) -> tuple[int, int]:
        late = await store.apply_late_events()
        return late.applied, late.updated

    swept = waits_holding_nothing_after(
        database_url,
        lock_send(lower),
        lambda: asyncio.run(with_store(webhooks_url, sweep)),
        lock_send(higher),
    )
    assert swept == (2, 2)


def suppress(address: str) -> str:
    return (
        "INSERT INTO email_suppressions (address, reason, source)"
        f" VALUES ('{address}', 'manual', 'test')"
    )


def test_a_suppression_import_waiting_for_the_lower_address_holds_none_after_it(
    database_url: str,
) -> None:
    """An import batch and a webhook or the consumer suppressing the same addresses, each
    waiting (ON CONFLICT DO NOTHING too) for the other's uncommitted entry: every writer of
    many suppressions inserts them in lower(address) order."""

    def import_higher_first() -> int:
        with psycopg.connect(database_url) as conn:
            lines = io.StringIO("email\nzed@example.com\nann@example.com\n")
            summary = import_file(conn, lines, reason="manual", source="import", on_invalid=print)
        return summary.added

    added = waits_holding_nothing_after(
        database_url, suppress("ann@example.com"), import_higher_first, suppress("zed@example.com")
    )
    assert added == 2


def test_a_relay_prune_skips_the_events_another_prune_holds(database_url: str) -> None:
    """Every relay with the events lane prunes the same published events: each skips those
    another holds instead of holding some and waiting for the rest."""
    with psycopg.connect(database_url) as conn:  # the higher id first in the heap
        conn.execute(
            "INSERT INTO email_send_events (id, send_id, dedupe_key, template, event, status,"
            " occurred_at, published_at) OVERRIDING SYSTEM VALUE"
            " SELECT id, id, 'k-' || id, 't', 'accepted', 'accepted', now(),"
            " now() - interval '2 days' FROM unnest(ARRAY[2, 1]) id"
        )
        in_heap = conn.execute("SELECT id FROM email_send_events ORDER BY ctid").fetchall()
        assert in_heap == [(2,), (1,)]
    apply_roles(database_url)
    prune = load_queries("mailbus.relay", "queries.sql")["prune_send_events"]

    def prune_as_relay() -> int:
        with login_as(database_url, "mailbus_relay") as url, psycopg.connect(url) as relay:
            return relay.execute(prune, {"retention_s": 86400}).rowcount

    lock = "SELECT id FROM email_send_events WHERE id = {} FOR UPDATE"
    deleted = waits_holding_nothing_after(  # another relay's prune, part-way
        database_url, lock.format(1), prune_as_relay, lock.format(2)
    )
    assert deleted == 1
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT id FROM email_send_events").fetchall() == [(1,)]


@pytest.fixture
def linguistic_database_url(services: StackServices) -> Iterator[str]:
    """A database whose collation is no byte order (ICU en-US: "ann" before "Zed"),
    migrated: the tests' own are C.UTF-8, where both orders of ASCII keys agree."""
    name = f"mailbus_test_icu_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE \"{name}\" LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0"
        )
    url = database_url_for(services.database_url, name)
    apply_migrations(url)
    yield url
    drop_database(services.database_url, name)


def enqueue(key: str) -> str:
    return (
        "INSERT INTO email_sends (dedupe_key, to_address, template)"
        f" VALUES ('{key}', 'u@example.com', 't')"
    )


def test_an_intake_batch_locks_keys_in_the_clients_order_whatever_the_collation(
    linguistic_database_url: str,
) -> None:
    """An intake and a client's enqueue_many inserting the same keys: the client sorts them
    by the column's collation, "C" (client/mailbus_client/queries.sql), "Zed" before "ann"."""
    url = linguistic_database_url
    rows = json.dumps(
        [
            {
                "dedupe_key": key,
                "to_address": "u@example.com",
                "template": "t",
                "priority": "p1",
                "expire_after_s": 3600.0,
                "payload_json": {},
            }
            for key in ("ann", "Zed")
        ]
    )

    def intake() -> tuple[int, int]:
        writer = RowWriter(url, max_age_s=86400.0)

        async def insert() -> tuple[int, int]:
            try:
                return await writer.insert(rows, [])
            finally:
                await writer.close()

        return asyncio.run(insert())

    inserted = waits_holding_nothing_after(url, enqueue("Zed"), intake, enqueue("ann"))
    assert inserted == (2, 0)


def test_retention_skips_a_send_whose_dead_letter_a_replay_holds(database_url: str) -> None:
    """`dlq replay` (and the console's) locks a dead letter, then resets its send, while
    retention's prune of sends locked the send, then waited to delete its letters: a
    circle. The prune now leaves the send and its letters for a later run, and its batch
    is still full (a short one ends the run): the next send past retention takes the
    place."""
    with psycopg.connect(database_url) as conn:
        older, old = "now() - interval '92 days'", "now() - interval '91 days'"  # floor: 90
        row = conn.execute(
            "WITH s AS (INSERT INTO email_sends (dedupe_key, to_address, template, status,"
            f" attempts, created_at, updated_at) VALUES ('dead', 'u@example.com', 't', 'failed',"
            f" 5, {older}, {older}) RETURNING id)"
            " INSERT INTO email_dead_letters (send_id, reason, created_at, published_at)"
            f" SELECT id, 'rejected', {older}, {older} FROM s RETURNING send_id, id"
        ).fetchone()
        assert row is not None
        send_id, letter_id = row
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
            f" created_at, updated_at) VALUES ('sent', 'v@example.com', 't', 'accepted', 1,"
            f" {old}, {old})"
        )
    apply_roles(database_url)
    replay = load_queries("mailbus.consumer", "dead_letters.sql")

    def prune_a_batch_of_one() -> int:
        with login_as(database_url, "mailbus_retention") as url, psycopg.connect(url) as conn:
            row = conn.execute("SELECT mailbus_prune('sends', 90 * 86400, 1)").fetchone()
        return int(row[0]) if row else -1

    deleted = waits_holding_nothing_after(
        database_url,
        replay["mark_replayed"].replace("%(id)s", str(letter_id)),
        prune_a_batch_of_one,
        replay["reset_send"].replace("%(send_id)s", str(send_id)),
    )
    assert deleted == 1  # the newer send, in the place of the one kept for the replay
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM email_dead_letters").fetchone() == (1,)
        assert conn.execute("SELECT dedupe_key FROM email_sends").fetchall() == [("dead",)]
