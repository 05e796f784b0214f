"""Mappings instead of code: which event type becomes which mail, read from a JSON file.

The shipped file is ``schemas/intake_mappings.json``; ``MAILBUS_INTAKE_MAPPINGS`` names a
file of the same shape that replaces it. Every entry is checked at start-up against its
Avro schema (the key pattern, the recipient field and the variables must be fields of the
event); a problem raises :class:`ConfigError` naming the setting and the entry, e.g.
``MAILBUS_INTAKE_MAPPINGS: mappings[1] ('OrderShipped'): 'to' names no field ...``.

An event's type is the writer schema its single-object header names (the fingerprint), so
an entry's schema and the versions kept as ``history/<stem>.<n>.avsc`` beside it are what
the intake reads.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from mailbus.kernel.errors import ConfigError
from mailbus.schemas.codec import AvroCodec
from mailbus_client.send_request import PRIORITIES

__all__ = ["EventMapping", "load_mappings", "parse_mappings"]

SETTING = "MAILBUS_INTAKE_MAPPINGS"
_MAX_EXPIRY_S = 366 * 24 * 3600
_TEMPLATE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")
_ENTRY_KEYS = {
    "event", "schema", "template", "dedupe_key", "to", "priority", "expire_after_s",
    "variables", "description", "occurred_at",
}  # fmt: skip
_REQUIRED = ("event", "schema", "template", "dedupe_key", "to", "priority")


@dataclass(frozen=True)
class EventMapping:
    """How one event type becomes one row."""

    event: str  # the Avro record's name, e.g. OrderPlaced
    codec: AvroCodec  # reads the current schema and its kept older versions
    template: str
    dedupe_key: str  # a str.format pattern over the event's fields
    key_fields: tuple[str, ...]  # the fields the pattern uses
    to: str  # the field holding the recipient
    priority: str
    expire_after_s: float | None  # seconds after enqueue; None: never (unless by policy)
    expiry_by_policy: bool  # 'expire_after_s' absent: the template's policy decides
    variables: tuple[str, ...]  # the fields that become payload_json
    occurred_at: str | None = None  # the timestamp field expiry and age count from


def load_mappings(path: str | None) -> tuple[EventMapping, ...]:
    """The mappings in ``path`` (MAILBUS_INTAKE_MAPPINGS), or the shipped ones when None."""
    if path is None:
        shipped = resources.files("mailbus.schemas")
        text = shipped.joinpath("intake_mappings.json").read_text()
        return parse_mappings(_json(text, "schemas/intake_mappings.json"), shipped)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror}") from None
    return parse_mappings(_json(text, path), Path(path).resolve().parent)


def parse_mappings(data: object, folder: Traversable | Path) -> tuple[EventMapping, ...]:
    """Check a decoded mappings file whose schemas are looked up in ``folder`` first."""
    if not isinstance(data, dict):
        raise ConfigError(SETTING, "expected a JSON object with a 'mappings' list")
    unknown = sorted(set(data) - {"mappings", "description"})
    if unknown:
        raise ConfigError(SETTING, f"unknown key {unknown[0]!r} (expected mappings, description)")
    entries = data.get("mappings")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(SETTING, "'mappings' must be a non-empty list")
    mappings: list[EventMapping] = []
    seen: set[bytes] = set()
    for number, entry in enumerate(entries):
        mapping = _parse_entry(entry, number, folder)
        where = _where(number, mapping.event)
        if any(other.event == mapping.event for other in mappings):
            raise ConfigError(SETTING, f"{where}: a second entry for {mapping.event!r}")
        if seen & set(mapping.codec.fingerprints):
            raise ConfigError(SETTING, f"{where}: its schema is already mapped by another entry")
        seen.update(mapping.codec.fingerprints)
        mappings.append(mapping)
    return tuple(mappings)


def _json(text: str, name: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(SETTING, f"{name} is not valid JSON: {exc}") from None


def _parse_entry(entry: object, number: int, folder: Traversable | Path) -> EventMapping:
    if not isinstance(entry, dict):
        raise ConfigError(SETTING, f"{_where(number, None)}: expected a JSON object")
    event = entry.get("event")
    where = _where(number, event if isinstance(event, str) else None)

    def fail(problem: str) -> ConfigError:
        return ConfigError(SETTING, f"{where}: {problem}")

    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}")
    missing = [key for key in _REQUIRED if not isinstance(entry.get(key), str) or not entry[key]]
    if missing:
        raise fail(f"{missing[0]!r} must be a non-empty string")
    codec, record = _schema(entry["schema"], folder, fail)
    if record.get("name") != event:
        raise fail(f"'event' is {event!r} but {entry['schema']} is the record {record['name']!r}")
    fields = {field["name"]: field["type"] for field in record["fields"]}
    if not _TEMPLATE.match(entry["template"]):
        raise fail("'template' must match [a-z0-9][a-z0-9_.-]* (at most 100 characters)")
    if entry["priority"] not in PRIORITIES:
        raise fail(f"'priority' must be one of {', '.join(PRIORITIES)}")
    key_fields = _check_pattern(entry["dedupe_key"], fields, fail)
    if not _is_string(fields.get(entry["to"])):
        raise fail(f"'to' names no string field of {event}: {entry['to']!r}")
    return EventMapping(
        event=str(event),
        codec=codec,
        template=entry["template"],
        dedupe_key=entry["dedupe_key"],
        key_fields=key_fields,
        to=entry["to"],
        priority=entry["priority"],
        expire_after_s=_expiry(entry.get("expire_after_s"), fail),
        expiry_by_policy="expire_after_s" not in entry,
        variables=_variables(entry.get("variables", "*"), fields, fail),
        occurred_at=_occurred_at(entry.get("occurred_at"), fields, fail),
    )


def _schema(name: str, folder: Traversable | Path, fail: Any) -> tuple[AvroCodec, dict[str, Any]]:
    if "/" in name or "\\" in name or not name.endswith(".avsc"):
        raise fail(f"'schema' must be a file name ending in .avsc, got {name!r}")
    for place in (folder, resources.files("mailbus.schemas")):
        candidate = place.joinpath(name)
        if candidate.is_file():
            history = place.joinpath("history")
            older = []
            if history.is_dir():
                stem = name.removesuffix(".avsc")
                kept = [item for item in history.iterdir() if _is_version_of(item.name, stem)]
                older = [item.read_text() for item in sorted(kept, key=_version_number)]
            text = candidate.read_text()
            try:
                record = json.loads(text)
                codec = AvroCodec(text, tuple(older))
            except Exception as exc:  # fastavro raises assorted errors on a bad schema
                raise fail(f"{name} is not a valid Avro schema: {exc}") from None
            if not isinstance(record, dict) or record.get("type") != "record":
                raise fail(f"{name} is not an Avro record schema")
            return codec, record
    raise fail(f"no schema file {name!r} beside the mappings file or in schemas/")


def _is_version_of(filename: str, stem: str) -> bool:
    number = filename.removeprefix(f"{stem}.").removesuffix(".avsc")
    return filename.startswith(f"{stem}.") and filename.endswith(".avsc") and number.isdigit()


def _version_number(item: Traversable) -> int:
    return int(item.name.rsplit(".", 2)[1])


def _check_pattern(pattern: str, fields: dict[str, Any], fail: Any) -> tuple[str, ...]:
    try:
        parts = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise fail(f"'dedupe_key' is not a valid pattern: {exc}") from None
    names = [name for _, name, _, _ in parts if name is not None]
    if not names:
        raise fail("'dedupe_key' must use at least one field, e.g. 'order-{order_id}-shipped'")
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if spec or conversion or name not in fields:
            raise fail(f"'dedupe_key' uses {{{name}}}, which is not a plain field of the event")
    return tuple(dict.fromkeys(names))


def _expiry(value: object, fail: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail("'expire_after_s' must be a number or null")
    if not 0 < value <= _MAX_EXPIRY_S:
        raise fail(f"'expire_after_s' must be in (0, {_MAX_EXPIRY_S}], got {value}")
    return float(value)


def _variables(value: object, fields: dict[str, Any], fail: Any) -> tuple[str, ...]:
    if value == "*":
        return tuple(fields)
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise fail("'variables' must be '*' or a list of field names")
    for name in value:
        if name not in fields:
            raise fail(f"'variables' names {name!r}, which is not a field of the event")
    return tuple(value)


def _occurred_at(value: object, fields: dict[str, Any], fail: Any) -> str | None:
    """The field named by 'occurred_at', else a field named occurred_at, when it is an
    Avro timestamp (timestamp-millis or -micros); None: expiry counts from the insert."""
    name = "occurred_at" if value is None else value
    if not isinstance(name, str) or (value is not None and name not in fields):
        raise fail(f"'occurred_at' names no field of the event: {value!r}")
    avro_type = fields.get(name)
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    if logical in ("timestamp-millis", "timestamp-micros"):
        return name
    if value is not None:
        raise fail(f"'occurred_at' names {name!r}, which is not a timestamp-millis/micros field")
    return None


def _is_string(avro_type: object) -> bool:
    if isinstance(avro_type, list):
        return "string" in avro_type
    return avro_type == "string"


def _where(number: int, event: str | None) -> str:
    return f"mappings[{number}]" + (f" ({event!r})" if event else "")
