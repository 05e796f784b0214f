"""Dead letters: from ``email_dead_letters`` to ``{prefix}.send.dlq`` through the relay."""

from __future__ import annotations

import time
from dataclasses import fields, replace
from typing import Any

import psycopg
from kafka_reader import Landed, read_messages
from psycopg.rows import class_row
from relay_runner import relay_thread, wait_until

from mailbus.kernel.settings import Settings
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
