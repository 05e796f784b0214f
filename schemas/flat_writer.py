"""Avro bodies of flat records, written without fastavro's per-call dispatch.

The relay encodes one pointer per row, and fastavro's ``schemaless_writer`` spent half of
its Python time doing so (docs/benchmarks/speed.md). :func:`flat_writer` compiles a
record schema whose fields are all ``long``, ``int``, ``string``, an ``enum``, a
``timestamp-micros`` long, or a union of ``null`` and one of those, into a function of
one record; any other schema gets None, and its codec keeps fastavro.

The compiled writer takes only the values it writes exactly as fastavro does: Python
``int`` within the type's bits, ``str``, a known enum symbol, an aware ``datetime`` (or an
``int``) for a timestamp, ``None`` for a union's null. For anything else (a missing
field, a naive datetime, a float, a tuple naming a union branch, ...) it returns None
and the caller hands the record to fastavro, which writes it or raises its own error.
tests/unit/test_flat_writer.py compares the two byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["flat_writer"]

FlatWriter = Callable[[dict[str, Any]], bytes | None]
_Field = Callable[[bytearray, Any], bool]  # appends the value; False: not one it takes

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _varint(out: bytearray, n: int) -> None:
    """Avro's zig-zag varint of a 64-bit ``n``."""
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _long(out: bytearray, value: Any) -> bool:
    if type(value) is not int or not _LONG_MIN <= value <= _LONG_MAX:
        return False
    _varint(out, value)
    return True


def _int(out: bytearray, value: Any) -> bool:
    if type(value) is not int or not _INT_MIN <= value <= _INT_MAX:
        return False
    _varint(out, value)
    return True


def _string(out: bytearray, value: Any) -> bool:
    if type(value) is not str:
        return False
    data = value.encode()
    _varint(out, len(data))
    out += data
    return True


def _timestamp_micros(out: bytearray, value: Any) -> bool:
    if type(value) is datetime:
        if value.tzinfo is None:
            return False  # fastavro reads a naive one as local time
        delta = value - _EPOCH
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _long(out, value)


def _enum(symbols: list[str]) -> _Field:
    index = {symbol: n for n, symbol in enumerate(symbols)}

    def write(out: bytearray, value: Any) -> bool:
        found = index.get(value) if type(value) is str else None
        if found is None:
            return False
        _varint(out, found)
        return True

    return write


def _nullable(null_index: int, value_index: int, write_value: _Field) -> _Field:
    def write(out: bytearray, value: Any) -> bool:
        if value is None:
            _varint(out, null_index)
            return True
        _varint(out, value_index)
        return write_value(out, value)

    return write


def _field_writer(schema: Any) -> _Field | None:
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        null_index = schema.index("null")
        branch = _field_writer(schema[1 - null_index])
        return None if branch is None else _nullable(null_index, 1 - null_index, branch)
    if schema == "long":
        return _long
    if schema == "int":
        return _int
    if schema == "string":
        return _string
    if isinstance(schema, dict):
        if schema.get("type") == "enum":
            return _enum(list(schema["symbols"]))
        if schema.get("type") == "long" and schema.get("logicalType") == "timestamp-micros":
            return _timestamp_micros
    return None


def flat_writer(parsed_schema: Any, header: bytes = b"") -> FlatWriter | None:
    """The compiled writer of a parsed record schema (its output starts with ``header``),
    or None if the schema is not flat."""
    if not isinstance(parsed_schema, dict) or parsed_schema.get("type") != "record":
        return None
    fields: list[tuple[str, _Field]] = []
    for field in parsed_schema["fields"]:
        write = _field_writer(field["type"])
        if write is None:
            return None
        fields.append((field["name"], write))

    def write_record(record: dict[str, Any]) -> bytes | None:
        out = bytearray(header)
        for name, write in fields:
            if name not in record or not write(out, record[name]):
                return None
        return bytes(out)

    return write_record
