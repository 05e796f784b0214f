"""The Avro single-object codec: framing, fingerprints, round trips, and what it refuses."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.kernel.errors import CodecError
from mailbus.schemas.codec import AvroCodec, SendPointer, dead_letter_codec, send_pointer_codec
from mailbus.schemas.dead_letter import DeadLetter

WHEN = datetime(2024, 5, 17, 9, 30, 12, 123456, tzinfo=UTC)
POINTER = SendPointer.of(1042, "order-1042-shipped", "p1", 3, WHEN)


def test_the_fingerprint_is_crc_64_avro_little_endian() -> None:
    # The Avro specification's test vector for the schema "int".
    assert AvroCodec('"int"').fingerprint == bytes.fromhex("8f5c393f1ad57572")


def test_a_value_is_magic_then_fingerprint_then_body() -> None:
    codec = send_pointer_codec()
    value = codec.encode(POINTER)
    assert value[:2] == b"\xc3\x01"
    assert value[2:10] == codec.fingerprint
    assert len(value) > 10


def test_send_pointer_round_trip() -> None:
    codec = send_pointer_codec()
    assert codec.decode(codec.encode(POINTER)) == POINTER


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "not an Avro single-object"),
        (b"", "not an Avro single-object"),
        (b"\xc3\x01", "not an Avro single-object"),
        (b"plain text, not Avro at all", "not an Avro single-object"),
    ],
)
def test_values_that_are_not_single_object_encoded(value: bytes | None, problem: str) -> None:
    with pytest.raises(CodecError, match=problem):
        send_pointer_codec().decode(value)


def test_a_truncated_value_is_refused() -> None:
    value = send_pointer_codec().encode(POINTER)
    for length in (10, 11, len(value) - 1):
        with pytest.raises(CodecError):
            send_pointer_codec().decode(value[:length])


def test_a_wrong_magic_is_refused() -> None:
    value = send_pointer_codec().encode(POINTER)
    with pytest.raises(CodecError, match="not an Avro single-object"):
        send_pointer_codec().decode(b"\xc3\x02" + value[2:])


def test_an_unknown_fingerprint_is_refused() -> None:
    # A dead letter is a valid value, but not of the send pointer's schema.
    value = dead_letter_codec().encode(_dead_letter().record())
    with pytest.raises(CodecError, match="unknown writer schema fingerprint"):
        send_pointer_codec().decode(value)


def test_trailing_bytes_are_refused() -> None:
    value = send_pointer_codec().encode(POINTER)
    with pytest.raises(CodecError, match="trailing bytes"):
        send_pointer_codec().decode(value + b"\x00")


def test_codecs_are_shared_and_distinct() -> None:
    assert send_pointer_codec() is send_pointer_codec()
    assert dead_letter_codec() is dead_letter_codec()
    assert dead_letter_codec().fingerprint != send_pointer_codec().fingerprint


def test_the_dead_letter_schema_has_exactly_the_fields_of_dead_letter() -> None:
    schema = json.loads(resources.files("mailbus.schemas").joinpath("dead_letter.avsc").read_text())
    assert schema["name"] == "DeadLetter" and schema["namespace"] == "dev.mailbus.v1"
    by_name = {field["name"]: field for field in schema["fields"]}
    assert list(by_name) == [
        "id", "send_id", "dedupe_key", "priority", "template", "reason", "status_code", "error",
        "attempts", "original_topic", "original_partition", "original_offset", "original_key",
        "original_value", "created_at",
    ]  # fmt: skip
    assert set(by_name) == {field.name for field in fields(DeadLetter)}
    for name, field in by_name.items():
        if isinstance(field["type"], list):  # nullable: ["null", T] with default null
            assert field["type"][0] == "null" and field["default"] is None, name
    assert by_name["created_at"]["type"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert by_name["original_value"]["type"] == ["null", "bytes"]


def _dead_letter(**changes: object) -> DeadLetter:
    values: dict[str, object] = {
        "id": 7,
        "reason": "rejected",
        "created_at": WHEN,
        "error": "http 422: mailbox unavailable",
        "attempts": 3,
        "send_id": 1042,
        "dedupe_key": "order-1042-shipped",
        "priority": "p1",
        "template": "order_shipped",
        "status_code": 422,
        "original_topic": "mailbus.send.p1",
        "original_partition": 4,
        "original_offset": 99,
        **changes,
    }
    return DeadLetter(**values)  # type: ignore[arg-type]


def test_dead_letter_round_trip() -> None:
    letter = _dead_letter()
    codec = dead_letter_codec()
    assert DeadLetter.from_record(codec.decode(codec.encode(letter.record()))) == letter


int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
dead_letters = st.builds(
    DeadLetter,
    id=int64,
    reason=st.text(),
    created_at=st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    error=st.text(),
    attempts=int32,
    send_id=st.none() | int64,
    dedupe_key=st.none() | st.text(),
    priority=st.none() | st.sampled_from(["p0", "p1", "p2"]),
    template=st.none() | st.text(),
    status_code=st.none() | int32,
    original_topic=st.none() | st.text(),
    original_partition=st.none() | int32,
    original_offset=st.none() | int64,
    original_key=st.none() | st.binary(),
    original_value=st.none() | st.binary(),
)


@given(dead_letters)
def test_every_dead_letter_survives_the_round_trip(letter: DeadLetter) -> None:
    codec = dead_letter_codec()
    assert DeadLetter.from_record(codec.decode(codec.encode(letter.record()))) == letter
