"""The PostgreSQL schema that holds mailbus's tables (MAILBUS_DB_SCHEMA, default
``mailbus``): every statement of the client names it, so it runs in the application's
connection whatever that connection's ``search_path``."""

from __future__ import annotations

import re

from mailbus_client.errors import ConfigError

__all__ = ["DEFAULT_SCHEMA", "parse_schema", "qualified"]

DEFAULT_SCHEMA = "mailbus"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def parse_schema(raw: str | None, setting: str = "MAILBUS_DB_SCHEMA") -> str:
    """The schema named by ``raw`` (default ``mailbus``): a plain lower-case identifier
    that needs no quoting, never ``public`` nor a ``pg_`` one (ConfigError otherwise)."""
    name = (raw or "").strip() or DEFAULT_SCHEMA
    if not _IDENTIFIER.fullmatch(name):
        raise ConfigError(
            setting,
            f"expected a plain identifier (a-z, 0-9, _; not starting with a digit; at most"
            f" 63 characters), got {name!r}",
        )
    if name == "public" or name.startswith("pg_"):
        raise ConfigError(
            setting, f"{name!r} is not mailbus's to take: name a schema of its own (mailbus)"
        )
    return name


def qualified(sql: str, schema: str) -> str:
    """``sql`` with each ``{schema}.`` naming ``schema`` (checked by :func:`parse_schema`)."""
    return sql.replace("{schema}.", f'"{parse_schema(schema, "schema")}".')
