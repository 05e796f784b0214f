"""A dead letter's DLQ record: key, headers (NULLs left out) and value."""

from __future__ import annotations

from datetime import UTC, datetime

from mailbus.relay.dead_letters import dead_letter_message
from mailbus.schemas.codec import dead_letter_codec
from mailbus.schemas.dead_letter import DeadLetter

WHEN = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)


def test_a_rejected_send_says_why_and_where_in_headers() -> None:
    letter = DeadLetter(
        id=12,
        reason="rejected",
        created_at=WHEN,
        error="http 422: bad recipient",
        attempts=2,
        send_id=1042,
        dedupe_key="order-1042-shipped",
        priority="p1",
        template="order_shipped",
        status_code=422,
        original_topic="mailbus.send.p1",
        original_partition=3,
        original_offset=123456789012,
    )
    message = dead_letter_message(letter, "mailbus.send.dlq")
    assert message.topic == "mailbus.send.dlq"
    assert message.key == b"order-1042-shipped"
    assert message.headers == (
        ("mailbus.dlq.reason", b"rejected"),
        ("mailbus.dlq.status_code", b"422"),
        ("mailbus.dlq.error", b"http 422: bad recipient"),
        ("mailbus.dlq.attempts", b"2"),
        ("mailbus.dlq.original.topic", b"mailbus.send.p1"),
        ("mailbus.dlq.original.partition", b"3"),
        ("mailbus.dlq.original.offset", b"123456789012"),
        ("mailbus.dlq.send_id", b"1042"),
        ("mailbus.dlq.id", b"12"),
    )
    assert DeadLetter.from_record(dead_letter_codec().decode(message.value)) == letter


def test_null_columns_have_no_header() -> None:
    letter = DeadLetter(id=5, reason="undecodable", created_at=WHEN)
    assert dict(letter.headers()) == {
        "mailbus.dlq.reason": b"undecodable",
        "mailbus.dlq.error": b"",
        "mailbus.dlq.attempts": b"0",
        "mailbus.dlq.id": b"5",
    }


def test_the_key_falls_back_to_the_original_key_then_the_id() -> None:
    assert DeadLetter(1, "undecodable", WHEN, original_key=b"\xffk").kafka_key() == b"\xffk"
    assert DeadLetter(1, "undecodable", WHEN, original_key=b"").kafka_key() == b""
    assert DeadLetter(77, "undecodable", WHEN).kafka_key() == b"77"
    assert DeadLetter(1, "rejected", WHEN, dedupe_key="k-1", original_key=b"x").kafka_key() == (
        b"k-1"
    )
