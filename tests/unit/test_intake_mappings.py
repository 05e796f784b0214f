"""Mappings file: the shipped one loads; each bad entry is refused with the entry named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mailbus.intake.events import EventReader, NewRow
from mailbus.intake.mappings import load_mappings
from mailbus.kernel.errors import ConfigError
from mailbus.schemas.codec import AvroCodec
from mailbus_client.policies import load_policy_book

_RESET_SCHEMA = {
    "type": "record",
    "name": "PasswordResetRequested",
    "namespace": "dev.example",
    "fields": [
        {"name": "request_id", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "attempt", "type": "int"},
        {"name": "link", "type": "string"},
    ],
}

_RESET = {
    "event": "PasswordResetRequested",
    "schema": "password_reset_requested.avsc",
    "template": "password_reset",
    "dedupe_key": "password-reset-{request_id}",
    "to": "email",
    "priority": "p0",
    "expire_after_s": 900,
    "variables": ["link"],
}


def _write(folder: Path, *entries: dict[str, Any]) -> str:
    (folder / "password_reset_requested.avsc").write_text(json.dumps(_RESET_SCHEMA))
    path = folder / "mappings.json"
    path.write_text(json.dumps({"mappings": list(entries)}))
    return str(path)


def test_the_shipped_mappings_read_order_placed_and_its_first_version() -> None:
    (mapping,) = load_mappings(None)
    assert (mapping.event, mapping.template, mapping.priority) == (
        "OrderPlaced",
        "order_confirmation",
        "p1",
    )
    assert mapping.dedupe_key == "order-{order_id}-confirmation"
    assert len(mapping.codec.fingerprints) == 2  # order_placed.avsc and history/order_placed.1


def test_a_new_event_type_needs_only_a_schema_and_an_entry(tmp_path: Path) -> None:
    mappings = load_mappings(_write(tmp_path, _RESET))
    reader = EventReader(mappings, load_policy_book(None))
    codec = AvroCodec(json.dumps(_RESET_SCHEMA))
    value = codec.encode(
        {"request_id": "r-9", "email": "ana@example.com", "attempt": 1, "link": "https://x.test/r"}
    )
    row = reader.read(value)
    assert isinstance(row, NewRow)
    assert (row.dedupe_key, row.template, row.priority, row.expire_after_s) == (
        "password-reset-r-9",
        "password_reset",
        "p0",
        900.0,
    )
    assert json.loads(row.payload_json) == {"link": "https://x.test/r"}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"template": ""}, "'template' must be a non-empty string"),
        ({"template": "Password Reset"}, "'template' must match"),
        ({"priority": "p9"}, "'priority' must be one of p0, p1, p2"),
        ({"event": "PasswordReset"}, "is the record 'PasswordResetRequested'"),
        ({"dedupe_key": "reset-{ticket}"}, "uses {ticket}, which is not a plain field"),
        ({"dedupe_key": "reset"}, "must use at least one field"),
        ({"dedupe_key": "reset-{request_id"}, "is not a valid pattern"),
        ({"to": "attempt"}, "'to' names no string field"),
        ({"variables": ["link", "token"]}, "'variables' names 'token'"),
        ({"variables": "all"}, "'variables' must be '*' or a list"),
        ({"expire_after_s": -5}, "'expire_after_s' must be in (0, "),
        ({"expire_after_s": "15m"}, "'expire_after_s' must be a number or null"),
        ({"schema": "missing.avsc"}, "no schema file 'missing.avsc'"),
        ({"schema": "../etc/passwd"}, "'schema' must be a file name ending in .avsc"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    good = {**_RESET, "event": "PasswordResetRequested"}
    with pytest.raises(ConfigError) as raised:
        load_mappings(_write(tmp_path, {**good, **change}))
    assert raised.value.setting == "MAILBUS_INTAKE_MAPPINGS"
    message = str(raised.value)
    assert message.startswith("MAILBUS_INTAKE_MAPPINGS: mappings[0]"), message
    assert problem in message


def test_the_second_entry_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mappings\[1\] \('PasswordResetRequested'\): a second"):
        load_mappings(_write(tmp_path, _RESET, _RESET))


def test_an_invalid_schema_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, _RESET)
    (tmp_path / "password_reset_requested.avsc").write_text('{"type": "record", "name": 1}')
    with pytest.raises(ConfigError, match="is not a valid Avro schema"):
        load_mappings(path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"mappings": []}', "'mappings' must be a non-empty list"),
        ('{"mappings": [1]}', "mappings[0]: expected a JSON object"),
    ],
)
def test_a_bad_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "mappings.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="MAILBUS_INTAKE_MAPPINGS") as raised:
        load_mappings(str(path))
    assert problem in str(raised.value)
