"""The console's audit (``console_audit``, migration 0029): who did what, when, on what, and
how many mails it touched. One row per action, written after the action by the process's
own database role (mailbus_operator); psycopg errors become :class:`StorageError`."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from mailbus.console.access import User
from mailbus.kernel import schema_guard
from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = ["recent", "record"]


def _q() -> dict[str, str]:
    return load_queries("mailbus.console", "console.sql")


def record(
    database_url: str, user: User, action: str, target: str = "", mails: int = 0, detail: str = ""
) -> None:
    params = {
        "who": user.name,
        "role": user.role,
        "action": action,
        "target": target[:500],
        "mails": mails,
        "detail": detail[:1000],
    }
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            schema_guard.check(conn)
            conn.execute(_q()["record"], params)
    except psycopg.Error as exc:
        raise StorageError(f"console audit not written: {exc}") from exc


def recent(database_url: str, limit: int = 100) -> list[dict[str, Any]]:
    try:
        with psycopg.connect(database_url, connect_timeout=5, row_factory=dict_row) as conn:
            schema_guard.check(conn)
            return conn.execute(_q()["recent"], {"limit": limit}).fetchall()
    except psycopg.Error as exc:
        raise StorageError(f"console audit not read: {exc}") from exc
