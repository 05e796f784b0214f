"""The compiled writer of flat records writes what fastavro writes, byte for byte, and
hands fastavro every value it does not take."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailbus.schemas.codec import body_writer, send_event_codec, send_pointer_codec
from mailbus.schemas.flat_writer import flat_writer

SCHEMAS = sorted(Path(__file__).resolve().parents[2].joinpath("schemas").rglob("*.avsc"))
HEADER = b"\xc3\x01header"

_longs = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 1, 63, 64, -64, -65, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]),
)
_times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
) | st.datetimes(timezones=st.just(timezone(timedelta(hours=-7))))
# What the compiled writer refuses, so fastavro writes it or raises: out of range, other
# types, naive datetimes, a tuple naming a union branch, and a missing field.
_MISSING = object()
_others = st.one_of(
    st.integers(2**63, 2**70),
    st.integers(-(2**70), -(2**63) - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.binary(max_size=8),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)),
    st.tuples(st.just("string"), st.text(max_size=5)),
    st.just(_MISSING),
)


@pytest.fixture(autouse=True, scope="module")
def _local_time_is_not_utc() -> Iterator[None]:
    # fastavro reads a naive datetime as local time: on a UTC machine it would not show
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/Los_Angeles"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def _values(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        branch = next(b for b in schema if b != "null")
        return st.none() | _values(branch)
    if schema == "long":
        return _longs
    if schema == "int":
        return st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, -1, 2**31 - 1, -(2**31)])
    if schema == "string":
        return st.text()
    if schema["type"] == "enum":
        return st.sampled_from(schema["symbols"])
    assert schema["logicalType"] == "timestamp-micros"
    return _times | _longs


def _records(parsed: Any, odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    fields = {f["name"]: _values(f["type"]) for f in parsed["fields"]}
    if odd:  # one field gets a value of any kind
        return st.sampled_from(sorted(fields)).flatmap(
            lambda name: st.fixed_dictionaries({**fields, name: _values_or_others(fields[name])})
        )
    return st.fixed_dictionaries(fields)


def _values_or_others(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return values | _others | st.text(max_size=3)


def _fastavro(parsed: Any, record: dict[str, Any]) -> bytes | type[BaseException]:
    out = io.BytesIO()
    out.write(HEADER)
    try:
        fastavro.schemaless_writer(out, parsed, record)
    except Exception as exc:
        return type(exc)
    return out.getvalue()


def _ours(parsed: Any, record: dict[str, Any]) -> bytes | type[BaseException]:
    try:
        return body_writer(HEADER, parsed)(record)
    except Exception as exc:
        return type(exc)


FLAT = [
    pytest.param(parsed, id=path.name)
    for path in SCHEMAS
    if flat_writer(parsed := fastavro.parse_schema(json.loads(path.read_text()))) is not None
]


def test_the_relay_schemas_are_compiled() -> None:
    # the pointer and the outcome event are what the relay writes per row
    for codec in (send_pointer_codec(), send_event_codec()):
        assert flat_writer(codec.schema) is not None, codec.schema["name"]


@pytest.mark.parametrize("parsed", FLAT)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_compiled_writer_writes_what_fastavro_writes(parsed: Any, data: Any) -> None:
    record = data.draw(_records(parsed, odd=False))
    written = flat_writer(parsed, HEADER)
    assert written is not None and written(record) == _fastavro(parsed, record)


@pytest.mark.parametrize("parsed", FLAT)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_value_it_does_not_take_is_written_or_refused_by_fastavro(parsed: Any, data: Any) -> None:
    record = data.draw(_records(parsed, odd=True))
    record = {name: value for name, value in record.items() if value is not _MISSING}
    assert _ours(parsed, record) == _fastavro(parsed, record)


def test_a_schema_that_is_not_flat_is_left_to_fastavro() -> None:
    nested = fastavro.parse_schema(
        {
            "type": "record",
            "name": "Outer",
            "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}}],
        }
    )
    assert flat_writer(nested) is None
    assert body_writer(HEADER, nested)({"tags": ["a"]}) == _fastavro(nested, {"tags": ["a"]})
