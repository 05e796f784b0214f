"""The intake's pure core: event bytes → a row or a rejection; a batch sorted; DLQ headers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mailbus.intake.dead_letters import IntakeDeadLetter, dead_letter_headers, shorter_forms
from mailbus.intake.events import EventReader, NewRow, Rejected, Waiting
from mailbus.intake.mappings import load_mappings, parse_mappings
from mailbus.intake.rows import letters_documents, rows_document
from mailbus.intake.service import Incoming, sort_batch
from mailbus.schemas.codec import AvroCodec, order_placed_codec
from mailbus_client.policies import load_policy_book, parse_policy_book

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
WHEN = datetime(2026, 11, 30, 12, 0, 1, 500_000, tzinfo=UTC)


def _event(**changes: object) -> dict[str, object]:
    event: dict[str, object] = {
        "event_id": "evt-1",
        "order_id": "1042",
        "customer_email": "ana@example.com",
        "occurred_at": WHEN,
        "customer_name": "Ana",
        "total": "42.50",
        "currency": "EUR",
    }
    event.update(changes)
    return event


@pytest.fixture(scope="module")
def reader() -> EventReader:
    return EventReader(load_mappings(None), load_policy_book(None))


def test_an_order_placed_becomes_its_confirmation_row(reader: EventReader) -> None:
    row = reader.read(order_placed_codec().encode(_event()))
    assert isinstance(row, NewRow)
    assert row.dedupe_key == "order-1042-confirmation"
    assert (row.to_address, row.template, row.priority) == (
        "ana@example.com",
        "order_confirmation",
        "p1",
    )
    assert json.loads(row.payload_json) == {
        "event_id": "evt-1",
        "order_id": "1042",
        "customer_email": "ana@example.com",
        "occurred_at": "2026-11-30T12:00:01.500000+00:00",
        "customer_name": "Ana",
        "total": "42.50",
        "currency": "EUR",
    }
    assert row.expire_after_s is None  # the shipped policy of order_* never expires


def test_an_event_of_the_first_schema_version_is_still_read(reader: EventReader) -> None:
    first = AvroCodec((SCHEMAS / "history" / "order_placed.1.avsc").read_text())
    assert first.fingerprint != order_placed_codec().fingerprint
    value = first.encode(
        {"event_id": "e", "order_id": "7", "customer_email": "bo@example.org", "occurred_at": WHEN}
    )
    row = reader.read(value)
    assert isinstance(row, NewRow)
    assert row.dedupe_key == "order-7-confirmation"
    assert json.loads(row.payload_json)["customer_name"] is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"not avro", "not an Avro single-object encoded value"),
        (b"", "not an Avro single-object encoded value"),
        (b"\xc3\x01" + bytes(8) + b"\x02", "no mapping reads schema 0000000000000000"),
    ],
    ids=["text", "empty", "unknown-schema"],
)
def test_undecodable_values_are_rejected(reader: EventReader, value: bytes, expected: str) -> None:
    decision = reader.read(value)
    assert decision == Rejected("undecodable", expected)


def test_a_truncated_body_is_undecodable(reader: EventReader) -> None:
    value = order_placed_codec().encode(_event())
    decision = reader.read(value[:-5])
    assert isinstance(decision, Rejected) and decision.reason == "undecodable"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"customer_email": ""}, "customer_email: is missing or empty"),
        ({"customer_email": "not-an-address"}, "customer_email: is not a valid email address"),
        ({"customer_email": "ana@example.com\r\nBcc: x@evil.test"}, "customer_email: contains CR"),
        ({"customer_name": "Ana\nBcc: x@evil.test"}, "customer_name: contains CR, LF or NUL"),
        ({"order_id": "10 42"}, "dedupe_key: must be printable ASCII"),
    ],
    ids=["missing-email", "invalid-address", "crlf-in-address", "lf-in-name", "space-in-key"],
)
def test_invalid_events_are_rejected_naming_the_field(
    reader: EventReader, changes: dict[str, object], field: str
) -> None:
    decision = reader.read(order_placed_codec().encode(_event(**changes)))
    assert isinstance(decision, Rejected)
    assert decision.reason == "invalid"
    assert decision.error.startswith(f"OrderPlaced: {field}"), decision.error
    assert "evil" not in decision.error  # the error names the field, never its value


def test_the_templates_policy_gives_the_expiry() -> None:
    book = parse_policy_book(
        {
            "policies": [
                {"name": "all", "match": "*", "expire_after_s": 60, "when_provider_down": "wait"}
            ]
        }
    )
    row = EventReader(load_mappings(None), book).read(order_placed_codec().encode(_event()))
    assert isinstance(row, NewRow) and row.expire_after_s == 60.0


def test_a_batch_is_sorted_into_rows_and_dead_letters_with_their_context(
    reader: EventReader,
) -> None:
    good = order_placed_codec().encode(_event())
    batch = [
        Incoming("orders.events", 2, 10, b"1042", good),
        Incoming("orders.events", 2, 11, b"k", b"junk", (("trace", b"abc"),)),
        Incoming("orders.events", 2, 12, b"1042", good),
    ]
    found = sort_batch(reader, batch)
    rows, letters = [row for _, row in found.rows], found.letters
    assert found.waiting is None
    assert [row.dedupe_key for row in rows] == ["order-1042-confirmation"] * 2
    assert len(letters) == 1
    letter = letters[0]
    assert (letter.partition, letter.offset, letter.key, letter.value) == (2, 11, b"k", b"junk")
    assert dead_letter_headers(letter) == [
        ("trace", b"abc"),
        ("mailbus.dlq.reason", b"intake_undecodable"),
        ("mailbus.dlq.error", b"not an Avro single-object encoded value"),
        ("mailbus.dlq.original.topic", b"orders.events"),
        ("mailbus.dlq.original.partition", b"2"),
        ("mailbus.dlq.original.offset", b"11"),
    ]


def test_the_dead_letter_error_header_is_bounded() -> None:
    letter = IntakeDeadLetter("invalid", "x" * 5000, "t", 0, 0, None, None)
    error = dict(dead_letter_headers(letter))["mailbus.dlq.error"]
    assert isinstance(error, bytes) and len(error) == 500


def test_the_rows_document_keeps_one_entry_per_key(reader: EventReader) -> None:
    rows = [
        reader.read(order_placed_codec().encode(_event(order_id=str(n % 3), event_id=str(n))))
        for n in range(6)
    ]
    document = json.loads(rows_document([row for row in rows if isinstance(row, NewRow)]))
    assert [entry["dedupe_key"] for entry in document] == [
        "order-0-confirmation",
        "order-1-confirmation",
        "order-2-confirmation",
    ]
    assert document[0]["payload_json"]["event_id"] == "0"  # the first event of a key wins
    assert document[0]["expire_after_s"] is None


def test_an_empty_dedupe_key_field_is_refused_naming_it(reader: EventReader) -> None:
    rejected = reader.read(order_placed_codec().encode(_event(order_id="")))
    assert rejected == Rejected(
        "invalid", "OrderPlaced: order_id: is missing or empty (part of the dedupe key)"
    )


def test_the_row_carries_occurred_at_for_expiry_and_age(reader: EventReader) -> None:
    row = reader.read(order_placed_codec().encode(_event()))
    assert isinstance(row, NewRow) and row.occurred_at == "2026-11-30T12:00:01.500000+00:00"
    assert json.loads(rows_document([row]))[0]["occurred_at"] == row.occurred_at


def test_a_nul_inside_a_nested_value_is_refused(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "Basket",
        "fields": [
            {"name": "basket_id", "type": "string"},
            {"name": "email", "type": "string"},
            {"name": "lines", "type": {"type": "array", "items": "string"}},
        ],
    }
    (tmp_path / "basket.avsc").write_text(json.dumps(schema))
    entry = {
        "event": "Basket",
        "schema": "basket.avsc",
        "template": "basket",
        "dedupe_key": "basket-{basket_id}",
        "to": "email",
        "priority": "p2",
        "expire_after_s": None,
    }
    mappings = parse_mappings({"mappings": [entry]}, tmp_path)
    assert mappings[0].occurred_at is None  # no timestamp field: expiry from the insert
    nested = EventReader(mappings, load_policy_book(None))
    codec = AvroCodec(json.dumps(schema))
    value = codec.encode({"basket_id": "b", "email": "a@example.com", "lines": ["ok", "a\x00b"]})
    assert nested.read(value) == Rejected(
        "invalid", "Basket: lines: contains NUL (in a nested value)"
    )


def test_a_registry_that_cannot_be_reached_makes_the_batch_wait() -> None:
    class Away:
        def get_schema(self, schema_id: int) -> object:
            raise ConnectionError("refused")

    from mailbus.schemas.registry import RegistryWriters

    now = [0.0]
    registry = RegistryWriters(Away(), clock=lambda: now[0])  # type: ignore[arg-type]
    waiting = EventReader(load_mappings(None), load_policy_book(None), registry)
    value = b"\x00\x00\x00\x00\x07" + b"body"
    assert waiting.read(value) == Waiting("schema registry unreachable: ConnectionError")
    batch = [Incoming("t", 0, 1, None, value)]
    found = sort_batch(waiting, batch)
    assert (found.rows, found.letters, found.waiting) == (
        [],
        [],
        "schema registry unreachable: ConnectionError",
    )
    assert waiting.read(b"not confluent") == Rejected(
        "undecodable", "not a Confluent wire-format Avro value"
    )


def test_dead_letters_go_in_bounded_documents_without_nul() -> None:
    letters = [
        IntakeDeadLetter("intake_invalid", f"bad\x00{n}", "t", 0, n, None, b"v" * 300)
        for n in range(10)
    ]
    documents = letters_documents(letters, limit=1000)
    assert len(documents) > 1 and all(len(document) <= 1000 for document in documents)
    entries = [entry for document in documents for entry in json.loads(document)]
    assert [entry["offset"] for entry in entries] == list(range(10))
    assert entries[3]["error"] == "bad3"
    assert letters_documents([]) == []


def test_a_letter_too_large_to_publish_has_ever_shorter_forms() -> None:
    letter = IntakeDeadLetter(
        "intake_undecodable", "e", "t", 0, 5, b"k" * 5000, b"v" * 1_000_000, (("h", b"x"),)
    )
    cut, bare = list(shorter_forms(letter))
    assert (len(cut.value or b""), len(cut.key or b""), cut.headers) == (65536, 1024, ())
    assert cut.truncated == "value of 1000000 bytes cut to 65536; 1 original headers dropped"
    assert bare.value is None
    headers = dict(dead_letter_headers(bare))
    assert headers["mailbus.dlq.truncated"] == (
        b"value of 1000000 bytes left out; 1 original headers dropped"
    )
    small = IntakeDeadLetter("intake_undecodable", "e", "t", 0, 5, None, b"tiny")
    assert [form.value for form in shorter_forms(small)] == [None]
