"""What one domain event becomes: a row to insert, or a rejection for the intake DLQ.

Pure: bytes in, a decision value out (:class:`NewRow`, :class:`Rejected`, or
:class:`Waiting` when what decodes the value cannot be reached yet: the schema registry
away, or a writer schema id it does not know yet). The event's
type is found from its single-object header (the writer schema's fingerprint), decoded by
that mapping's codec (``mailbus.schemas.codec``), and checked by the enqueue helper's own rules
(``mailbus_client.send_request``: the address, the key, the template, the payload's size) plus
one of the intake's: no string field of an event may carry CR, LF or NUL, since any field
may end up in a header or a subject line; nor may a nested one carry NUL, which
PostgreSQL cannot store in ``payload_json``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from mailbus.kernel.errors import CodecError, InvalidSendError, SchemaUnavailable
from mailbus.schemas.codec import single_object_fingerprint
from mailbus.schemas.registry import RegistryWriters, confluent_schema_id
from mailbus_client.policies import PolicyBook
from mailbus_client.send_request import SendRequest, reject_line_breaks, validate_send_request

from .mappings import EventMapping

__all__ = ["EventReader", "NewRow", "Rejected", "Waiting"]


@dataclass(frozen=True)
class NewRow:
    """An ``email_sends`` row to insert unless its dedupe key exists."""

    dedupe_key: str
    to_address: str
    template: str
    payload_json: str  # validated, serialised template variables
    priority: str
    expire_after_s: float | None  # expires_at = occurred_at (else the insert's now()) + this
    event: str  # the event type, for logs and counts
    occurred_at: str | None = None  # ISO-8601, when the event happened; None: unknown
    traceparent: str | None = None  # the event's W3C trace context (docs/guides/tracing.md)
    tracestate: str | None = None


@dataclass(frozen=True)
class Rejected:
    """An event that goes to the intake DLQ, and why."""

    reason: str  # "undecodable" or "invalid"
    error: str  # short, names the field; never the field's value


@dataclass(frozen=True)
class Waiting:
    """An event that cannot be decoded yet; it is neither a row nor a dead letter."""

    error: str


class EventReader:
    """Turns raw event values into decisions, for the event types of ``mappings``."""

    def __init__(
        self,
        mappings: Iterable[EventMapping],
        policies: PolicyBook,
        registry: RegistryWriters | None = None,
    ) -> None:
        self._by_fingerprint: dict[bytes, EventMapping] = {}
        self._by_name: dict[str, EventMapping] = {}
        self._policies = policies
        self._registry = registry  # MAILBUS_SCHEMA_REGISTRY_URL: Confluent framing
        for mapping in mappings:
            self._by_name[mapping.codec.schema["name"]] = mapping
            for fingerprint in mapping.codec.fingerprints:
                self._by_fingerprint[fingerprint] = mapping

    def read(self, value: bytes | None) -> NewRow | Rejected | Waiting:
        if self._registry is not None:
            return self._read_confluent(value, self._registry)
        try:
            fingerprint = single_object_fingerprint(value)
            mapping = self._by_fingerprint.get(fingerprint)
            if mapping is None:
                return Rejected("undecodable", f"no mapping reads schema {fingerprint.hex()}")
            event = mapping.codec.decode(value)
        except CodecError as exc:
            return Rejected("undecodable", str(exc))
        try:
            return self._row(mapping, event)
        except InvalidSendError as exc:
            return Rejected("invalid", f"{mapping.event}: {exc}")

    def _read_confluent(
        self, value: bytes | None, registry: RegistryWriters
    ) -> NewRow | Rejected | Waiting:
        """The event type is the writer schema's record name, as the registry holds it."""
        try:
            writer = registry.get(confluent_schema_id(value))
            name = writer.get("name") if isinstance(writer, dict) else None
            mapping = self._by_name.get(str(name))
            if mapping is None:
                return Rejected("undecodable", f"no mapping reads records named {name}")
            event = registry.decode(value, mapping.codec.schema)
        except SchemaUnavailable as exc:
            return Waiting(str(exc))
        except CodecError as exc:
            return Rejected("undecodable", str(exc))
        try:
            return self._row(mapping, event)
        except InvalidSendError as exc:
            return Rejected("invalid", f"{mapping.event}: {exc}")

    def _row(self, mapping: EventMapping, event: dict[str, Any]) -> NewRow:
        for name, value in event.items():
            if isinstance(value, str):
                reject_line_breaks(name, value)
        to_address = event.get(mapping.to)
        if not isinstance(to_address, str) or not to_address:
            raise InvalidSendError(mapping.to, "is missing or empty (the recipient)")
        key_parts = {name: _key_text(event.get(name)) for name in mapping.key_fields}
        for name, part in key_parts.items():  # order--confirmation would merge orders
            if not part:
                raise InvalidSendError(name, "is missing or empty (part of the dedupe key)")
        variables = {name: _jsonable(event.get(name)) for name in mapping.variables}
        for name, variable in variables.items():
            _reject_nul(name, variable)
        request = SendRequest(
            dedupe_key=mapping.dedupe_key.format_map(key_parts),
            to_address=to_address,
            template=mapping.template,
            payload=variables,
            priority=mapping.priority,
        )
        try:
            payload = validate_send_request(request)
        except InvalidSendError as exc:
            if exc.field == "to_address":
                raise InvalidSendError(mapping.to, exc.problem) from None
            raise
        expire_after_s = mapping.expire_after_s
        if mapping.expiry_by_policy:
            expire_after_s = self._policies.for_template(mapping.template).expire_after_s
        return NewRow(
            dedupe_key=request.dedupe_key,
            to_address=to_address,
            template=mapping.template,
            payload_json=payload.decode(),
            priority=mapping.priority,
            expire_after_s=expire_after_s,
            event=mapping.event,
            occurred_at=_occurred_at(event, mapping.occurred_at),
        )


def _occurred_at(event: dict[str, Any], field_name: str | None) -> str | None:
    value = None if field_name is None else event.get(field_name)
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _reject_nul(name: str, value: object) -> None:
    """Raise if a string anywhere inside ``value`` holds NUL, naming the top-level field."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidSendError(name, "contains NUL (in a nested value)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_nul(name, key)
            _reject_nul(name, item)
    elif isinstance(value, list):
        for item in value:
            _reject_nul(name, item)


def _key_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _jsonable(value: object) -> Any:
    """Avro values as template variables: times as ISO-8601 text, bytes as base64."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return json.loads(json.dumps(value, default=str))
