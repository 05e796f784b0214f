"""Avro values in the Confluent wire format, schemas held by a schema registry.

A registry that cannot be reached (a timeout, a 5xx) or does not know a schema id (yet)
raises :class:`SchemaUnavailable`, which is temporary: the value is fine, what decodes it is
away. Only bytes that cannot be decoded raise :class:`CodecError`. A failed fetch is
remembered for :data:`RETRY_AFTER_S`, so a batch of events of one id asks once.

With ``MAILBUS_SCHEMA_REGISTRY_URL`` set, a value is ``00``, the registry's 4-byte
big-endian schema id, then the Avro binary body (the same body as ``mailbus.schemas.codec``
writes). Subjects are named by topic (``{topic}-value``); registering a schema also sets
the subject's compatibility to BACKWARD, so the registry refuses a change old readers
cannot follow. The client is confluent-kafka's ``SchemaRegistryClient``; values written by
its ``AvroSerializer`` are read here.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterable
from functools import cache
from typing import TYPE_CHECKING, Any

import fastavro

from mailbus.kernel.errors import CodecError, ConfigError, SchemaUnavailable
from mailbus.kernel.settings import Settings
from mailbus_client.send_request import PRIORITIES

from .codec import (
    AvroCodec,
    body_writer,
    dead_letter_codec,
    read_body,
    send_event_codec,
    send_pointer_codec,
    shipped_schema,
)

if TYPE_CHECKING:  # imported where a registry is used: its client and authlib, ~0.15 s
    from confluent_kafka.schema_registry import SchemaRegistryClient

__all__ = [
    "RegistryCodec",
    "RegistryWriters",
    "ValueCodec",
    "confluent_schema_id",
    "dead_letter_value_codec",
    "pointer_codec",
    "register",
    "register_shipped",
    "registry_client",
    "send_event_value_codec",
    "subject",
    "value_codec",
]

SETTING = "MAILBUS_SCHEMA_REGISTRY_URL"
_MAGIC = b"\x00"
_HEADER_LENGTH = 5
COMPATIBILITY = "BACKWARD"
RETRY_AFTER_S = 0.2


def subject(topic: str) -> str:
    """The TopicNameStrategy subject of a topic's values."""
    return f"{topic}-value"


@cache
def registry_client(url: str, auth: str = "", ca_file: str | None = None) -> SchemaRegistryClient:
    """A client of the registry at ``url``: ``auth`` is ``user:password`` for HTTP basic
    auth (MAILBUS_SCHEMA_REGISTRY_AUTH or its _FILE), ``ca_file`` the CA its TLS certificate
    is checked against (MAILBUS_SCHEMA_REGISTRY_CA_FILE; None: the system's)."""
    conf: dict[str, str] = {"url": url}
    if auth:
        conf["basic.auth.user.info"] = auth
    if ca_file is not None:
        conf["ssl.ca.location"] = ca_file
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(conf)


def settings_registry_client(settings: Settings) -> SchemaRegistryClient:
    """:func:`registry_client` as the settings name it (MAILBUS_SCHEMA_REGISTRY_URL set)."""
    assert settings.schema_registry_url is not None
    url, auth = settings.schema_registry_url, settings.schema_registry_auth
    return registry_client(url, auth, settings.schema_registry_ca_file)


def confluent_schema_id(value: bytes | None) -> int:
    """The schema id of a Confluent wire-format ``value``, else raise CodecError."""
    if value is None or len(value) <= _HEADER_LENGTH or value[:1] != _MAGIC:
        raise CodecError("not a Confluent wire-format Avro value")
    return int(struct.unpack(">I", value[1:_HEADER_LENGTH])[0])


class RegistryWriters:
    """Writer schemas by registry id, fetched once each."""

    def __init__(
        self, client: SchemaRegistryClient, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._clock = clock
        self._parsed: dict[int, Any] = {}
        self._failed: dict[int, tuple[float, str]] = {}  # id -> (until, why)

    def add(self, schema_id: int, parsed: Any) -> None:
        self._parsed[schema_id] = parsed

    def get(self, schema_id: int) -> Any:
        found = self._parsed.get(schema_id)
        if found is None:
            until, why = self._failed.get(schema_id, (0.0, ""))
            if self._clock() < until:
                raise SchemaUnavailable(why)
            try:
                found = self._parsed[schema_id] = self._fetch(schema_id)
            except SchemaUnavailable as exc:
                self._failed[schema_id] = (self._clock() + RETRY_AFTER_S, str(exc))
                raise
            self._failed.pop(schema_id, None)
        return found

    def decode(self, value: bytes | None, reader: Any) -> dict[str, Any]:
        """``value`` (Confluent framing) resolved into the parsed ``reader`` schema."""
        schema_id = confluent_schema_id(value)
        assert value is not None
        return read_body(value, _HEADER_LENGTH, self.get(schema_id), reader)

    def _fetch(self, schema_id: int) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            found = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:  # 404: a schema registered after this build
            status = exc.http_status_code
            raise SchemaUnavailable(
                f"schema registry cannot give writer schema id {schema_id} ({status})"
            ) from None
        except Exception as exc:  # unreachable registry: httpx errors
            raise SchemaUnavailable(f"schema registry unreachable: {type(exc).__name__}") from None
        if found.schema_type not in (None, "AVRO") or found.schema_str is None:
            raise CodecError(f"writer schema id {schema_id} is not Avro")
        try:
            return fastavro.parse_schema(json.loads(found.schema_str))
        except Exception as exc:  # a registry may hold schemas fastavro rejects
            raise CodecError(f"writer schema id {schema_id}: {type(exc).__name__}") from None


class RegistryCodec:
    """Encodes with the current schema's registry id; decodes any id the registry knows,
    resolved into the current schema (the same interface as :class:`AvroCodec`)."""

    def __init__(
        self, client: SchemaRegistryClient, schema_json: str, topics: Iterable[str]
    ) -> None:
        self._schema = fastavro.parse_schema(json.loads(schema_json))
        ids = [register(client, schema_json, topic) for topic in topics]
        if not ids:
            raise ValueError("a registry codec needs at least one topic")
        self.schema_id = ids[0]
        self._write = body_writer(_MAGIC + struct.pack(">I", self.schema_id), self._schema)
        self._writers = RegistryWriters(client)
        for schema_id in ids:
            self._writers.add(schema_id, self._schema)

    def encode(self, record: dict[str, Any]) -> bytes:
        return self._write(record)

    def decode(self, value: bytes | None) -> dict[str, Any]:
        return self._writers.decode(value, self._schema)


def register(client: SchemaRegistryClient, schema_json: str, topic: str) -> int:
    """Register ``schema_json`` under ``{topic}-value`` with BACKWARD compatibility; its id."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    name = subject(topic)
    try:
        _require_compatibility(client, name)
        return int(client.register_schema(name, Schema(schema_json, "AVRO")))
    except SchemaRegistryError as exc:
        raise ConfigError(
            SETTING, f"{name}: {exc.error_message} ({exc.http_status_code})"
        ) from None
    except Exception as exc:  # unreachable registry: httpx errors
        raise ConfigError(
            SETTING, f"cannot reach the schema registry: {type(exc).__name__}"
        ) from None


def _require_compatibility(client: SchemaRegistryClient, name: str) -> None:
    """Set the subject's BACKWARD rule. Processes starting together race to create it; a
    loser hears 409 "already exists" (Apicurio) and accepts the rule the winner set."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        client.set_compatibility(subject_name=name, level=COMPATIBILITY)
    except SchemaRegistryError as exc:
        if exc.http_status_code != 409 or client.get_compatibility(name) != COMPATIBILITY:
            raise


def value_codec(settings: Settings, filename: str, topics: Iterable[str]) -> ValueCodec:
    """The codec of ``schemas/<filename>`` values on ``topics``: Confluent framing through
    the registry when ``MAILBUS_SCHEMA_REGISTRY_URL`` is set, else single-object."""
    text = shipped_schema(filename)
    if settings.schema_registry_url is None:
        return AvroCodec(text)
    return RegistryCodec(settings_registry_client(settings), text, tuple(topics))


ValueCodec = AvroCodec | RegistryCodec


def pointer_codec(settings: Settings) -> ValueCodec:
    """Values of ``{prefix}.send.p0/p1/p2``, framed as the settings say."""
    if settings.schema_registry_url is None:
        return send_pointer_codec()
    return value_codec(settings, "send_pointer.avsc", [settings.topic(p) for p in PRIORITIES])


def dead_letter_value_codec(settings: Settings) -> ValueCodec:
    """Values of ``{prefix}.send.dlq``, framed as the settings say."""
    if settings.schema_registry_url is None:
        return dead_letter_codec()
    return value_codec(settings, "dead_letter.avsc", [settings.dlq_topic])


def send_event_value_codec(settings: Settings) -> ValueCodec:
    """Values of ``{prefix}.send.events``, framed as the settings say."""
    if settings.schema_registry_url is None:
        return send_event_codec()
    return value_codec(settings, "send_event.avsc", [settings.events_topic])


def register_shipped(settings: Settings, intake_topic: str) -> list[str]:
    """`mailbus migrate`: register the shipped schemas under their topics' subjects (BACKWARD);
    the subjects, each with its schema id."""
    client = settings_registry_client(settings)
    plan = [("send_pointer.avsc", settings.topic(p)) for p in PRIORITIES]
    plan += [("dead_letter.avsc", settings.dlq_topic)]
    plan += [("send_event.avsc", settings.events_topic)]
    plan += [("order_placed.avsc", intake_topic)]
    return [
        f"{subject(topic)}={register(client, shipped_schema(name), topic)}" for name, topic in plan
    ]
