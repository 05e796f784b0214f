"""Avro values on Kafka, framed with the Avro single-object encoding.

A value is ``C3 01``, the writer schema's CRC-64-AVRO fingerprint (8 bytes,
little-endian), then the Avro binary body (Avro 1.11 specification, "Single object
encoding"). fastavro writes the body (flat records: the compiled writer of ``flat_writer``,
byte for byte the same); avro-python3, deprecated upstream, is not used.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema
from fastavro.read import SchemaResolutionError

from mailbus.kernel.errors import CodecError, SchemaUnavailable
from mailbus.schemas.flat_writer import flat_writer

__all__ = [
    "AvroCodec",
    "SendPointer",
    "body_writer",
    "dead_letter_codec",
    "order_placed_codec",
    "read_body",
    "schema_fingerprint",
    "send_event_codec",
    "send_pointer_codec",
    "shipped_schema",
    "single_object_fingerprint",
]

_MAGIC = b"\xc3\x01"
_HEADER_LENGTH = len(_MAGIC) + 8


def schema_fingerprint(parsed_schema: Any) -> bytes:
    """The CRC-64-AVRO fingerprint of a parsed schema, as the single-object header has it."""
    canonical = fastavro.schema.to_parsing_canonical_form(parsed_schema)
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))  # little-endian


def single_object_fingerprint(value: bytes | None) -> bytes:
    """The writer schema's fingerprint in a single-object encoded ``value``, else raise."""
    if value is None or len(value) <= _HEADER_LENGTH or value[:2] != _MAGIC:
        raise CodecError("not an Avro single-object encoded value")
    return value[2:_HEADER_LENGTH]


class AvroCodec:
    """Encodes and decodes one record schema shipped in ``schemas/*.avsc``.

    ``older``: earlier versions of the schema (JSON texts) whose values are still read,
    resolved into the current schema by Avro's schema resolution; values are always
    written with the current one.
    """

    def __init__(self, schema_json: str, older: tuple[str, ...] = ()) -> None:
        self._schema = fastavro.parse_schema(json.loads(schema_json))
        self.schema: Any = self._schema  # parsed; its "name" is the record's full name
        self.fingerprint = schema_fingerprint(self._schema)
        self._write = body_writer(_MAGIC + self.fingerprint, self._schema)
        self._writers: dict[bytes, Any] = {}
        for text in older:
            writer = fastavro.parse_schema(json.loads(text))
            self._writers.setdefault(schema_fingerprint(writer), writer)
        self._writers.pop(self.fingerprint, None)

    @property
    def fingerprints(self) -> tuple[bytes, ...]:
        """The writer fingerprints this codec reads: the current schema's first."""
        return (self.fingerprint, *self._writers)

    def encode(self, record: dict[str, Any]) -> bytes:
        return self._write(record)

    def decode(self, value: bytes | None) -> dict[str, Any]:
        found = single_object_fingerprint(value)
        assert value is not None
        writer = self._schema if found == self.fingerprint else self._writers.get(found)
        if writer is None:
            raise CodecError(f"unknown writer schema fingerprint {found.hex()}")
        return read_body(value, _HEADER_LENGTH, writer, self._schema)


def read_body(value: bytes, offset: int, writer: Any, reader: Any) -> dict[str, Any]:
    """The Avro record at ``value[offset:]`` written with ``writer``, resolved into ``reader``.

    Shared by both framings (single-object here, Confluent in ``mailbus.schemas.registry``).
    """
    body = io.BytesIO(value)
    body.seek(offset)
    try:
        record = fastavro.schemaless_reader(body, writer, None if writer is reader else reader)
    except SchemaResolutionError as exc:  # a newer writer schema than this reader follows
        raise SchemaUnavailable(f"writer schema not readable by this build yet: {exc}") from None
    except Exception as exc:  # fastavro raises assorted errors on truncated bodies
        raise CodecError(f"undecodable Avro body: {type(exc).__name__}") from None
    if not isinstance(record, dict):
        raise CodecError("the Avro body is not a record")
    if body.tell() != len(value):
        raise CodecError("trailing bytes after the Avro body")
    return record


def body_writer(header: bytes, schema: Any) -> Callable[[dict[str, Any]], bytes]:
    """Writes ``header`` then the Avro binary body of a record of ``schema``: compiled for a
    flat schema (:mod:`mailbus.schemas.flat_writer`), by fastavro for the rest and for any
    value the compiled writer does not take. Shared by both framings."""
    compiled = flat_writer(schema, header)

    def write(record: dict[str, Any]) -> bytes:
        written = None if compiled is None else compiled(record)
        if written is not None:
            return written
        body = io.BytesIO()
        body.write(header)
        fastavro.schemaless_writer(body, schema, record)
        return body.getvalue()

    return write


class SendPointer(dict[str, Any]):
    """Typed constructor of a send pointer record (a plain dict for fastavro)."""

    @classmethod
    def of(
        cls, send_id: int, dedupe_key: str, priority: str, attempt: int, enqueued_at: datetime
    ) -> SendPointer:
        return cls(
            send_id=send_id,
            dedupe_key=dedupe_key,
            priority=priority,
            attempt=attempt,
            enqueued_at=enqueued_at,
        )


def shipped_schema(filename: str) -> str:
    """The JSON text of ``schemas/<filename>``."""
    return resources.files("mailbus.schemas").joinpath(filename).read_text()


@cache
def _shipped_codec(filename: str) -> AvroCodec:
    return AvroCodec(shipped_schema(filename))


def send_pointer_codec() -> AvroCodec:
    """Values of ``{prefix}.send.p0/p1/p2`` (``schemas/send_pointer.avsc``)."""
    return _shipped_codec("send_pointer.avsc")


def dead_letter_codec() -> AvroCodec:
    """Values of ``{prefix}.send.dlq`` (``schemas/dead_letter.avsc``)."""
    return _shipped_codec("dead_letter.avsc")


def send_event_codec() -> AvroCodec:
    """Values of ``{prefix}.send.events`` (``schemas/send_event.avsc``)."""
    return _shipped_codec("send_event.avsc")


def order_placed_codec() -> AvroCodec:
    """Values of the intake topic's OrderPlaced events (``schemas/order_placed.avsc``)."""
    return _shipped_codec("order_placed.avsc")
