"""Outcome events out: recorded by the trigger with the change, published by the relay to
``{prefix}.send.events`` in each send's order, at least once."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from kafka_reader import read_messages, read_pointers
from relay_runner import wait_until

from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.relay.events import GATHER_S
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.relay.relay import EVENTS, POINTERS, Relay
from mailbus.schemas.codec import send_event_codec
from mailbus.schemas.send_event import HEADER_EVENT, HEADER_EVENT_ID, SendEvent

EVENT_COLUMNS = "send_id, event, status, delivery_status"


def execute(database_url: str, *statements: str) -> None:
    """Each statement in a transaction of its own."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def recorded(database_url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(f"SELECT {EVENT_COLUMNS} FROM email_send_events ORDER BY id").fetchall()


def unpublished(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_send_events WHERE published_at IS NULL"
        ).fetchone()
    assert row is not None
    return int(row[0])


def seed_sends(database_url: str, count: int) -> None:
    execute(
        database_url,
        "INSERT INTO email_sends (dedupe_key, to_address, template)"
        f" SELECT 'send-' || n, 'u' || n || '@example.com', 'invoice'"
        f" FROM generate_series(1, {count}) n",
    )


def churn(database_url: str, sends: int, rounds: int) -> None:
    """``rounds`` reported changes of each send, one transaction each, sends interleaved
    so that consecutive event ids belong to different sends."""
    states = ("deferred", "delivered", "bounced", "complained")
    with psycopg.connect(database_url, autocommit=True) as conn:
        for n in range(rounds):
            for send in range(1, sends + 1):
                conn.execute(
                    "UPDATE email_sends SET delivery_status = %s WHERE dedupe_key = %s",
                    (states[n % len(states)], f"send-{send}"),
                )


def events_on_topic(settings: Settings, expect: int, timeout: float = 60) -> list[SendEvent]:
    landed = read_messages(settings.kafka_bootstrap, [settings.events_topic], expect, timeout)
    codec = send_event_codec()
    events = []
    for message in landed:
        event = SendEvent.from_record(codec.decode(message.value))
        assert message.key == event.dedupe_key.encode()
        headers = dict(message.headers)
        assert headers[HEADER_EVENT] == event.event.encode()
        assert headers[HEADER_EVENT_ID] == str(event.event_id).encode()
        events.append(event)
    return events


def ids_by_send(events: Sequence[SendEvent]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = defaultdict(list)
    for event in events:
        found[event.dedupe_key].append(event.event_id)
    return dict(found)


def table_ids_by_send(database_url: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = defaultdict(list)
    with psycopg.connect(database_url) as conn:
        for key, event_id in conn.execute(
            "SELECT dedupe_key, id FROM email_send_events ORDER BY id"
        ):
            found[key].append(event_id)
    return dict(found)


@contextmanager
def relays(
    settings: Settings,
    publishers: Sequence[PointerPublisher],
    lanes: Sequence[frozenset[str]] = (),
) -> Iterator[list[Relay]]:
    """Relays in threads, one per publisher (all lanes unless ``lanes`` says)."""
    stop = threading.Event()
    running = [
        Relay(settings, publisher, *lanes[n : n + 1]) for n, publisher in enumerate(publishers)
    ]
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in running]
    for thread in threads:
        thread.start()
    try:
        yield running
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()


class JitteryPublisher(PointerPublisher):
    """Takes 0-40 ms longer, at random, before each batch."""

    def __init__(self, settings: Settings, seed: int) -> None:
        super().__init__(kafka_client_config(settings))
        self._rng = random.Random(seed)

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        time.sleep(self._rng.uniform(0, 0.04))
        return super().publish(messages, stop)


class Crash(Exception):
    """The relay process dies here."""


class DiesAfterTheAck(PointerPublisher):
    """Dies once Kafka acknowledged the batch's last wave (each call is one wave)."""

    def __init__(self, settings: Settings, waves: int) -> None:
        super().__init__(kafka_client_config(settings))
        self._waves_left = waves

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        failed = super().publish(messages, stop)
        assert failed == []
        self._waves_left -= 1
        if self._waves_left == 0:
            raise Crash  # Kafka has them all; the transaction marking them never commits
        return failed


def test_every_reported_change_records_exactly_one_event(database_url: str) -> None:
    execute(
        database_url,
        "INSERT INTO email_sends (dedupe_key, to_address, template)"
        " VALUES ('a', 'a@example.com', 't'), ('b', 'b@example.com', 't')",
        # Rows written in a reported state record it at once.
        "INSERT INTO email_sends (dedupe_key, to_address, template, status, last_error)"
        " VALUES ('s', 's@example.com', 't', 'suppressed', 'address suppressed')",
        # Internal churn and relay marks record nothing.
        "UPDATE email_sends SET status = 'sending' WHERE dedupe_key IN ('a', 'b')",
        "UPDATE email_sends SET published_at = now() WHERE dedupe_key = 'a'",
        "UPDATE email_sends SET status = 'accepted', message_id = 'm-a' WHERE dedupe_key = 'a'",
        "UPDATE email_sends SET status = 'accepted' WHERE dedupe_key = 'a'",  # no change
        "UPDATE email_sends SET delivery_status = 'deferred', last_event_at = now()"
        " WHERE dedupe_key = 'a'",
        "UPDATE email_sends SET delivery_status = 'deferred', last_event_at = now()"
        " WHERE dedupe_key = 'a'",  # a second deferral is not a change
        "UPDATE email_sends SET delivery_status = 'delivered' WHERE dedupe_key = 'a'",
        "UPDATE email_sends SET status = 'failed', last_error = 'rejected: 422'"
        " WHERE dedupe_key = 'b'",
        "UPDATE email_sends SET status = 'pending' WHERE dedupe_key = 'b'",  # a replay
        "UPDATE email_sends SET status = 'sending' WHERE dedupe_key = 'b'",
        "UPDATE email_sends SET status = 'unknown' WHERE dedupe_key = 'b'",
    )
    with psycopg.connect(database_url) as conn:  # a change rolled back records nothing
        conn.execute("UPDATE email_sends SET status = 'expired' WHERE dedupe_key = 'b'")
        conn.rollback()
    with psycopg.connect(database_url) as conn:
        ids = dict(conn.execute("SELECT dedupe_key, id FROM email_sends").fetchall())
        errors = conn.execute("SELECT event, error FROM email_send_events ORDER BY id").fetchall()
    a, b, s = ids["a"], ids["b"], ids["s"]
    assert recorded(database_url) == [
        (s, "suppressed", "suppressed", None),
        (a, "accepted", "accepted", None),
        (a, "deferred", "accepted", "deferred"),
        (a, "delivered", "accepted", "delivered"),
        (b, "failed", "failed", None),
        (b, "unknown", "unknown", None),
    ]
    assert errors[0] == ("suppressed", "address suppressed")
    assert errors[1] == ("accepted", None)
    assert errors[4] == ("failed", "rejected: 422")


def test_one_statement_over_many_rows_records_each_rows_events_in_order(
    database_url: str,
) -> None:
    seed_sends(database_url, 300)
    execute(
        database_url,
        # 100 already accepted: a second acceptance in the bulk update is no change
        "UPDATE email_sends SET status = 'accepted' WHERE id <= 100",
        # one statement: 200 acceptances, 300 deliveries; odd rows also get a message id
        "UPDATE email_sends SET status = 'accepted', delivery_status = 'delivered',"
        " message_id = CASE WHEN id % 2 = 1 THEN 'm-' || id END",
        "UPDATE email_sends SET status = 'accepted' WHERE false",  # no row: no event
        "INSERT INTO email_sends (dedupe_key, to_address, template, status, last_error)"
        " SELECT 'sup-' || n, 's@example.com', 't', 'suppressed', 'address suppressed'"
        " FROM generate_series(1, 3) n",
    )
    with psycopg.connect(database_url) as conn:
        ids = [i for (i,) in conn.execute("SELECT id FROM email_sends ORDER BY id")]
        bulk = conn.execute(
            "SELECT send_id, event, status, delivery_status, message_id FROM email_send_events"
            " WHERE id > 100 AND send_id <= %s ORDER BY send_id, id",
            (ids[299],),
        ).fetchall()
    events = recorded(database_url)
    assert events[:100] == [(i, "accepted", "accepted", None) for i in ids[:100]]
    expected = []
    for i in ids[:300]:
        message_id = f"m-{i}" if i % 2 == 1 else None
        if i > ids[99]:
            expected.append((i, "accepted", "accepted", "delivered", message_id))
        expected.append((i, "delivered", "accepted", "delivered", message_id))
    assert bulk == expected  # each row's events, status first
    assert sorted(events[600:]) == [(i, "suppressed", "suppressed", None) for i in ids[300:]]
    assert len(events) == 603


def test_the_relay_publishes_each_event_once_in_the_order_of_the_changes(
    settings: Settings,
) -> None:
    seed_sends(settings.database_url, 20)
    churn(settings.database_url, sends=20, rounds=4)
    with relays(settings, [PointerPublisher(kafka_client_config(settings))]) as running:
        wait_until(lambda: unpublished(settings.database_url) == 0, 60, "80 events published")
        churn(settings.database_url, sends=20, rounds=1)  # while it idles: woken by NOTIFY
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "20 more published")
    assert running[0].stats.send_events == 100
    events = events_on_topic(settings, 100)
    assert len(events) == 100 and len({e.event_id for e in events}) == 100  # each once
    assert ids_by_send(events) == table_ids_by_send(settings.database_url)  # in order


def test_the_event_lane_publishes_the_events_of_close_settles_in_one_pass(
    settings: Settings,
) -> None:
    """A consumer commits a settle every few milliseconds under load, each with a NOTIFY.
    The event lane starts a pass at most every GATHER_S, so 50 changes committed 4 ms
    apart go out in a few passes, not one pass (a transaction, a flush) per change."""
    seed_sends(settings.database_url, 50)
    kafka = kafka_client_config(settings)
    with relays(settings, [PointerPublisher(kafka)], [frozenset({EVENTS})]) as [lane]:
        time.sleep(0.5)  # idle, listening
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            first = time.monotonic()
            for send in range(1, 51):
                conn.execute(
                    "UPDATE email_sends SET status = 'accepted' WHERE dedupe_key = %s",
                    (f"send-{send}",),
                )
                time.sleep(0.004)
            committing_s = time.monotonic() - first
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "50 events published")
    assert lane.stats.send_events == 50
    # A pass at the first change, then one per GATHER_S at most (one a pass per change
    # made about 30 here).
    assert lane.stats.batches <= committing_s / GATHER_S + 2


def test_a_relay_killed_after_the_ack_publishes_the_batch_again(settings: Settings) -> None:
    """At least once: the second relay republishes what the first one never marked."""
    seed_sends(settings.database_url, 10)
    churn(settings.database_url, sends=10, rounds=3)
    doomed = Relay(settings, DiesAfterTheAck(settings, waves=3))  # 3 changes of each send
    with pytest.raises(Crash):
        doomed.publish_send_events(threading.Event())
    doomed.close()
    assert unpublished(settings.database_url) == 30  # the marks were rolled back
    with relays(settings, [PointerPublisher(kafka_client_config(settings))]):
        wait_until(lambda: unpublished(settings.database_url) == 0, 60, "30 events published")
    events = events_on_topic(settings, 60)
    assert len(events) == 60  # every event twice
    first_seen = [
        e for n, e in enumerate(events) if e.event_id not in {x.event_id for x in events[:n]}
    ]
    # A consumer that drops an event id it has seen gets each event once, in order.
    assert ids_by_send(first_seen) == table_ids_by_send(settings.database_url)


def test_two_relays_never_reorder_a_sends_events(settings: Settings) -> None:
    """Without the advisory lock, the second relay claims the next batch while the first
    still publishes its own, and a send's later event can land first."""
    settings = replace(settings, relay_batch_size=7)
    seed_sends(settings.database_url, 5)
    churn(settings.database_url, sends=5, rounds=60)
    publishers = [JitteryPublisher(settings, seed) for seed in (1, 2)]
    with relays(settings, publishers) as running:
        churn(settings.database_url, sends=5, rounds=20)  # more while they run
        wait_until(lambda: unpublished(settings.database_url) == 0, 120, "400 published")
    assert sum(r.stats.send_events for r in running) == 400
    events = events_on_topic(settings, 400)
    assert len(events) == 400
    assert ids_by_send(events) == table_ids_by_send(settings.database_url)


def test_published_events_are_pruned_after_a_day(settings: Settings) -> None:
    seed_sends(settings.database_url, 3)
    churn(settings.database_url, sends=3, rounds=2)
    execute(
        settings.database_url,
        "UPDATE email_send_events SET published_at = now() - interval '25 hours'"
        " WHERE id IN (SELECT id FROM email_send_events ORDER BY id LIMIT 2)",
        "UPDATE email_send_events SET published_at = now() - interval '23 hours'"
        " WHERE id IN (SELECT id FROM email_send_events ORDER BY id OFFSET 2 LIMIT 2)",
    )
    with relays(settings, [PointerPublisher(kafka_client_config(settings))]):
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "the rest published")
    with psycopg.connect(settings.database_url) as conn:
        left = conn.execute("SELECT count(*) FROM email_send_events").fetchone()
    assert left == (4,)  # the two past 24 h are gone; the rest stays
    assert events_on_topic(settings, 2, timeout=30)  # the unpublished two went out


def test_pointers_do_not_wait_for_an_events_topic_in_trouble(settings: Settings) -> None:
    """`mailbus relay` runs the event lane beside the pointer lane: with the events topic
    gone (a relay upgraded before `mailbus migrate`), events wait and pointers flow."""
    admin = AdminClient(kafka_client_config(settings))
    admin.delete_topics([settings.events_topic])[settings.events_topic].result(30)
    seed_sends(settings.database_url, 5)
    execute(settings.database_url, "UPDATE email_sends SET status = 'failed'")  # 5 events
    lanes = [frozenset({POINTERS}), frozenset({EVENTS})]
    kafka = kafka_client_config(settings)
    with relays(settings, [PointerPublisher(kafka), PointerPublisher(kafka)], lanes):
        time.sleep(1.0)  # the event lane is stuck on its topic by now
        execute(
            settings.database_url,
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " SELECT 'later-' || n, 'l' || n || '@example.com', 'invoice'"
            " FROM generate_series(1, 10) n",
        )
        seen = read_pointers(settings.kafka_bootstrap, [settings.topic("p1")], 10, timeout=20)
        assert unpublished(settings.database_url) == 5
    assert sorted(seen) == sorted(f"later-{n}" for n in range(1, 11))
