"""Is a new version of an Avro schema backward compatible with the one before it?

Backward compatible (Confluent's ``BACKWARD``): a reader with the new schema reads every
value written with the old one. :func:`backward_problems` says why not, as a list of
sentences (empty: compatible), from two checks:

- structural, field by field of every record (nested ones too): a field the new schema
  adds needs a default; a field it drops is reported unless the old schema gave it a
  default (a reader that never asks for a field does not care, but producers that still
  send it deserve a deliberate decision); a field whose type changed is reported unless
  Avro's promotion rules allow it (int → long/float/double, long → float/double,
  float → double, string ↔ bytes) or the new type is a union holding the old one;
- behavioural: a sample value written with the old schema by fastavro must read with the
  new schema as the reader schema.

Pure apart from fastavro; used by ``tests/unit/test_schema_compat.py`` for every
``schemas/*.avsc`` against its kept versions (``schemas/history/``) and its git history.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import fastavro.utils

__all__ = ["backward_problems"]

_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def backward_problems(old_json: str, new_json: str) -> list[str]:
    """Why values written with ``old_json`` cannot be read with ``new_json`` (empty: fine)."""
    old, new = json.loads(old_json), json.loads(new_json)
    problems = _compare(old, new, _name(old))
    try:
        old_parsed = fastavro.parse_schema(old)
        new_parsed = fastavro.parse_schema(new)
        sample = fastavro.utils.generate_one(old_parsed)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, old_parsed, sample)
        buffer.seek(0)
        fastavro.schemaless_reader(buffer, old_parsed, new_parsed)
    except Exception as exc:  # fastavro raises assorted errors on unresolvable schemas
        problems.append(f"a value written with the old schema does not read: {exc}")
    return problems


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


def _compare(old: Any, new: Any, where: str) -> list[str]:
    if _is_record(old) and _is_record(new):
        return _compare_records(old, new, where)
    if _signature(old) == _signature(new):
        return []
    old_branches, new_branches = _branches(old), _branches(new)
    if all(_readable_as(branch, new_branches) for branch in old_branches):
        return []
    return [f"{where}: type changed from {_signature(old)} to {_signature(new)}"]


def _compare_records(old: dict[str, Any], new: dict[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    old_fields = {field["name"]: field for field in old.get("fields", [])}
    new_fields = {field["name"]: field for field in new.get("fields", [])}
    for name, field in new_fields.items():
        aliases = set(field.get("aliases", ()))
        previous = old_fields.get(name) or next(
            (old_fields[alias] for alias in aliases if alias in old_fields), None
        )
        if previous is None:
            if "default" not in field:
                problems.append(f"{where}.{name}: new field without a default")
            continue
        problems.extend(_compare(previous["type"], field["type"], f"{where}.{name}"))
    renamed = {alias for field in new_fields.values() for alias in field.get("aliases", ())}
    for name, field in old_fields.items():
        if name not in new_fields and name not in renamed and "default" not in field:
            problems.append(f"{where}.{name}: field removed although it had no default")
    return problems


def _is_record(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "record"


def _branches(schema: Any) -> list[Any]:
    return list(schema) if isinstance(schema, list) else [schema]


def _readable_as(branch: Any, candidates: list[Any]) -> bool:
    signature = _signature(branch)
    for candidate in candidates:
        other = _signature(candidate)
        if other == signature or other in _PROMOTIONS.get(signature, set()):
            return True
        if _is_record(branch) and _is_record(candidate) and _name(branch) == _name(candidate):
            return not _compare_records(branch, candidate, _name(branch))
    return False


def _signature(schema: Any) -> str:
    """A comparable text of a type, ignoring docs and defaults."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "[" + ",".join(_signature(branch) for branch in schema) + "]"
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        return f"{kind}:{schema.get('name')}"
    if kind == "array":
        return f"array<{_signature(schema['items'])}>"
    if kind == "map":
        return f"map<{_signature(schema['values'])}>"
    logical = schema.get("logicalType")
    return f"{kind}/{logical}" if logical else str(kind)
