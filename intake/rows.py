"""Writes a batch's rows (one statement) and dead letters in one transaction (PostgreSQL adapter).

psycopg appears only here. A batch is one JSON array handed to ``jsonb_to_recordset``;
the payloads are already-validated JSON texts and are spliced in as they are, so the
batch costs one serialisation of the small fields and one round trip.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import psycopg

from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

from .dead_letters import IntakeDeadLetter
from .events import NewRow

__all__ = ["RowWriter", "letters_document", "rows_document"]


def rows_document(rows: Sequence[NewRow]) -> str:
    """The JSON array the ``insert_rows`` statement reads; one entry per distinct key."""
    seen: set[str] = set()
    parts = []
    for row in rows:
        if row.dedupe_key in seen:  # the first event of a key wins, as in the table
            continue
        seen.add(row.dedupe_key)
        head = json.dumps(
            {
                "dedupe_key": row.dedupe_key,
                "to_address": row.to_address,
                "template": row.template,
                "priority": row.priority,
                "expire_after_s": row.expire_after_s,
            },
            separators=(",", ":"),
        )
        parts.append(f'{head[:-1]},"payload_json":{row.payload_json}}}')
    return "[" + ",".join(parts) + "]"


def letters_document(letters: Sequence[IntakeDeadLetter]) -> str:
    """The JSON array the ``insert_dead_letters`` statement reads."""
    return json.dumps(
        [
            {
                "reason": letter.reason,
                "error": letter.error[:500],
                "topic": letter.topic,
                "partition": letter.partition,
                "offset": letter.offset,
                "key": None if letter.key is None else base64.b64encode(letter.key).decode(),
                "value": None if letter.value is None else base64.b64encode(letter.value).decode(),
            }
            for letter in letters
        ],
        separators=(",", ":"),
    )


class RowWriter:
    """One connection; :meth:`insert` commits a batch or raises, leaving nothing behind."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._conn: psycopg.AsyncConnection[Any] | None = None
        queries = load_queries("mailbus.intake", "queries.sql")
        self._rows_sql = queries["insert_rows"]
        self._letters_sql = queries["insert_dead_letters"]

    async def insert(self, rows: str | None, letters: str | None) -> int:
        """In one transaction: the rows of ``rows`` (:func:`rows_document`) whose keys are
        new, and the dead letters of ``letters`` (:func:`letters_document`) not recorded
        yet. Return how many rows were inserted."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
            async with self._conn.transaction():
                inserted = 0
                if rows is not None:
                    cursor = await self._conn.execute(self._rows_sql, {"rows": rows})
                    inserted = max(cursor.rowcount, 0)
                if letters is not None:
                    await self._conn.execute(self._letters_sql, {"letters": letters})
                return inserted
        except psycopg.Error as exc:
            await self.close()
            raise StorageError(f"intake batch insert failed: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(psycopg.Error):
                await conn.close()
