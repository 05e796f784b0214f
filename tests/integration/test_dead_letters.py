"""Dead letters: from ``email_dead_letters`` to ``{prefix}.send.dlq`` through the relay."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import psycopg
from kafka_reader import Landed, read_messages
from psycopg.rows import class_row
from relay_runner import relay_thread, wait_until

from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.relay.relay import POINTERS, Relay
from mailbus.schemas.codec import dead_letter_codec
from mailbus.schemas.dead_letter import DeadLetter

_INSERT = """
INSERT INTO email_dead_letters (
    send_id, dedupe_key, priority, template, reason, status_code, error, attempts,
    original_topic, original_partition, original_offset, original_key, original_value)
VALUES (
    %(send_id)s, %(dedupe_key)s, %(priority)s, %(template)s, %(reason)s, %(status_code)s,
    %(error)s, %(attempts)s, %(original_topic)s, %(original_partition)s, %(original_offset)s,
    %(original_key)s, %(original_value)s)
RETURNING id
"""
_COLUMNS = ", ".join(field.name for field in fields(DeadLetter))
_NULLS = {
    field.name: None for field in fields(DeadLetter) if field.name not in ("id", "created_at")
}


def insert_dead_letter(conn: psycopg.Connection[Any], **values: Any) -> int:
    row = conn.execute(_INSERT, {**_NULLS, "error": "", "attempts": 0, **values}).fetchone()
    assert row is not None
    return int(row[0])


def stored(database_url: str) -> dict[int, DeadLetter]:
    with (
        psycopg.connect(database_url) as conn,
        conn.cursor(row_factory=class_row(DeadLetter)) as cur,
    ):
        return {
            letter.id: letter
            for letter in cur.execute(f"SELECT {_COLUMNS} FROM email_dead_letters")
        }


def unpublished(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_dead_letters WHERE published_at IS NULL"
        ).fetchone()
        assert row is not None
        return int(row[0])


def failed_send(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status, attempts)"
        " VALUES ('order-7-shipped', 'ann@example.com', 'order_shipped', 'p0', 'failed', 3)"
        " RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def by_key(records: list[Landed]) -> dict[bytes | None, Landed]:
    return {record.key: record for record in records}


def test_dead_letters_reach_the_dlq_saying_why_and_where(settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as conn:
        send_id = failed_send(conn)
        rejected = insert_dead_letter(
            conn,
            send_id=send_id,
            dedupe_key="order-7-shipped",
            priority="p0",
            template="order_shipped",
            reason="rejected",
            status_code=422,
            error="http 422: mailbox unavailable",
            attempts=3,
            original_topic=settings.topic("p0"),
            original_partition=2,
            original_offset=41,
        )
        undecodable = insert_dead_letter(
            conn,
            reason="undecodable",
            error="not an Avro single-object encoded value",
            original_topic=settings.topic("p1"),
            original_partition=0,
            original_offset=7,
            original_key=b"\xffraw-key",
            original_value=b"\x00\x01not avro",
        )
    with relay_thread(settings) as relay:
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "both published")
    assert relay.stats.dead_letters == 2
    assert relay.stats.published == 0  # a failed send is not pointed at again

    records = read_messages(settings.kafka_bootstrap, [settings.dlq_topic], 2, timeout=30)
    assert len(records) == 2, "exactly one DLQ record per dead letter"
    landed = by_key(records)
    rows = stored(settings.database_url)
    codec = dead_letter_codec()

    first = landed[b"order-7-shipped"]
    value = codec.decode(first.value)
    assert set(value) == {field.name for field in fields(DeadLetter)}
    assert DeadLetter.from_record(value) == rows[rejected]
    assert value["send_id"] == send_id
    assert value["status_code"] == 422
    assert value["original_offset"] == 41
    assert value["original_key"] is None and value["original_value"] is None
    assert dict(first.headers) == {
        "mailbus.dlq.reason": b"rejected",
        "mailbus.dlq.status_code": b"422",
        "mailbus.dlq.error": b"http 422: mailbox unavailable",
        "mailbus.dlq.attempts": b"3",
        "mailbus.dlq.original.topic": settings.topic("p0").encode(),
        "mailbus.dlq.original.partition": b"2",
        "mailbus.dlq.original.offset": b"41",
        "mailbus.dlq.send_id": str(send_id).encode(),
        "mailbus.dlq.id": str(rejected).encode(),
    }

    second = landed[b"\xffraw-key"]  # no dedupe key: keyed by the original key
    value = codec.decode(second.value)
    assert DeadLetter.from_record(value) == rows[undecodable]
    assert value["send_id"] is None and value["dedupe_key"] is None
    assert value["original_value"] == b"\x00\x01not avro"
    assert dict(second.headers) == {  # NULL columns have no header
        "mailbus.dlq.reason": b"undecodable",
        "mailbus.dlq.error": b"not an Avro single-object encoded value",
        "mailbus.dlq.attempts": b"0",
        "mailbus.dlq.original.topic": settings.topic("p1").encode(),
        "mailbus.dlq.original.partition": b"0",
        "mailbus.dlq.original.offset": b"7",
        "mailbus.dlq.id": str(undecodable).encode(),
    }


def test_a_rolled_back_dead_letter_is_never_published(settings: Settings) -> None:
    with relay_thread(settings), psycopg.connect(settings.database_url) as conn:
        insert_dead_letter(conn, reason="rejected", error="rolled back")
        conn.rollback()
        committed = insert_dead_letter(conn, reason="max_attempts", error="committed")
        conn.commit()
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "the committed one")
    records = read_messages(settings.kafka_bootstrap, [settings.dlq_topic], 1, timeout=30)
    assert len(records) == 1
    # Neither a dedupe key nor an original key: keyed by the dead letter's id.
    assert records[0].key == str(committed).encode()
    assert dead_letter_codec().decode(records[0].value)["error"] == "committed"


def test_a_dead_letter_wakes_an_idle_relay(settings: Settings) -> None:
    patient = replace(settings, relay_poll_interval=60.0)  # only a NOTIFY can wake it in time
    with relay_thread(patient) as relay:
        time.sleep(1.5)  # the relay is now waiting on LISTEN
        started = time.monotonic()
        with psycopg.connect(settings.database_url) as conn:
            insert_dead_letter(conn, reason="invalid_address", error="invalid to_address")
        wait_until(lambda: relay.stats.dead_letters == 1, 30, "the dead letter published")
        assert time.monotonic() - started < 10


class RefusesDeadLettersOnce(PointerPublisher):
    """The real producer, but Kafka's acknowledgement of the first batch of dead letters
    never comes (as when the broker times it out): the relay un-marks them."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(kafka_client_config(settings))
        self._dlq_topic = settings.dlq_topic
        self.refused = 0

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        if not self.refused and any(m.topic == self._dlq_topic for m in messages):
            self.refused += 1
            return list(range(len(messages)))
        return super().publish(messages, stop)


def test_a_dead_letter_kafka_did_not_take_goes_out_while_sends_keep_waking_the_relay(
    settings: Settings,
) -> None:
    """Issue 37 skips the claim of dead letters on a wake-up by new sends alone. A dead
    letter whose claim Kafka did not acknowledge is claimed again by the next pass, whatever
    woke it, not once the sends stop (reviewed: it waited for the sends to stop)."""
    polling = replace(settings, relay_poll_interval=1.0)
    publisher = RefusesDeadLettersOnce(polling)
    relay = Relay(polling, publisher=publisher, lanes=frozenset({POINTERS}))
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        time.sleep(1.5)  # listening
        with psycopg.connect(settings.database_url) as conn:
            insert_dead_letter(conn, reason="rejected", error="refused once")
        wait_until(lambda: publisher.refused == 1, 10, "the first claim of the dead letter")
        refused_at, published_at = time.monotonic(), None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            for n in range(100):  # a new send every 0.05 s for 5 s
                conn.execute(
                    "INSERT INTO email_sends (dedupe_key, to_address, template)"
                    " VALUES (%s, %s, 'welcome')",
                    (f"busy-{n}", f"busy-{n}@example.com"),
                )
                time.sleep(0.05)
                if published_at is None and relay.stats.dead_letters == 1:
                    published_at = time.monotonic()
    finally:
        stop.set()
        thread.join(timeout=30)
    assert published_at is not None, "the dead letter waited for the sends to stop"
    assert published_at - refused_at < 3.5  # the relay's 1 s pause after a refusal, and some
    assert unpublished(settings.database_url) == 0
