"""Writes a batch's rows (one statement) and dead letters in one transaction (PostgreSQL adapter).

psycopg appears only here. A batch is one JSON array handed to ``jsonb_to_recordset``;
the payloads are already-validated JSON texts and are spliced in as they are, so the
batch costs one serialisation of the small fields and one round trip. Dead letters carry
whole events (up to the broker's limit, about 1 MB each, base64): they go in documents of
at most :data:`MAX_DOCUMENT` characters each, since one ``jsonb`` value holds at most
255 MB and one parameter 1 GB.

A refusal that depends on the data (SQLSTATE class 22 data exception, 23 integrity, 54
program limit) raises :class:`UnstorableError`: the caller splits the batch to find the
event; anything else (the connection, a lock, a missing grant) is :class:`StorageError`,
retried.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import psycopg

from mailbus.kernel import schema_guard
from mailbus.kernel.errors import StorageError, UnstorableError
from mailbus.kernel.pooling import connect_options
from mailbus_client.sqlfiles import load_queries

from .dead_letters import IntakeDeadLetter
from .events import NewRow

__all__ = ["MAX_DOCUMENT", "RowWriter", "letters_documents", "rows_document"]

MAX_DOCUMENT = 32 * 1024 * 1024  # characters of one dead-letter document
_PERMANENT_CLASSES = ("22", "23", "54")


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
                "occurred_at": row.occurred_at,
                "traceparent": row.traceparent,
                "tracestate": row.tracestate,
            },
            separators=(",", ":"),
        )
        parts.append(f'{head[:-1]},"payload_json":{row.payload_json}}}')
    return "[" + ",".join(parts) + "]"


def letters_documents(letters: Sequence[IntakeDeadLetter], limit: int = MAX_DOCUMENT) -> list[str]:
    """The JSON arrays the ``insert_dead_letters`` statement reads, each of at most
    ``limit`` characters unless one letter alone is longer (one letter, one document)."""
    documents: list[str] = []
    parts: list[str] = []
    size = 0
    for letter in letters:
        part = json.dumps(
            {
                "reason": letter.reason,
                "error": letter.error[:500].replace("\x00", ""),  # text never holds NUL
                "topic": letter.topic,
                "partition": letter.partition,
                "offset": letter.offset,
                "key": None if letter.key is None else base64.b64encode(letter.key).decode(),
                "value": None if letter.value is None else base64.b64encode(letter.value).decode(),
            },
            separators=(",", ":"),
        )
        if parts and size + len(part) + 1 > limit:
            documents.append("[" + ",".join(parts) + "]")
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    if parts:
        documents.append("[" + ",".join(parts) + "]")
    return documents


class RowWriter:
    """One connection; :meth:`insert` commits a batch or raises, leaving nothing behind."""

    def __init__(
        self, database_url: str, max_age_s: float, transaction_pooling: bool = False
    ) -> None:
        self._url = database_url
        self._connect_options = connect_options(transaction_pooling)
        self._max_age_s = max_age_s
        self._conn: psycopg.AsyncConnection[Any] | None = None
        queries = load_queries("mailbus.intake", "queries.sql")
        self._rows_sql = queries["insert_rows"]
        self._letters_sql = queries["insert_dead_letters"]

    async def insert(self, rows: str | None, letters: Sequence[str]) -> tuple[int, int]:
        """In one transaction: the rows of ``rows`` (:func:`rows_document`) whose keys are
        new, and the dead letters of ``letters`` (:func:`letters_documents`) not recorded
        yet. Return how many rows were inserted to be mailed, and how many were recorded
        expired (older than the maximum age)."""
        try:
            if self._conn is None or self._conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, **self._connect_options
                )
                await schema_guard.check_async(conn)  # a database restored behind the build
                self._conn = conn
            async with self._conn.transaction():
                statuses: list[tuple[str, int]] = []
                if rows is not None:
                    params = {"rows": rows, "max_age_s": self._max_age_s}
                    cursor = await self._conn.execute(self._rows_sql, params)
                    statuses = await cursor.fetchall()
                for document in letters:
                    await self._conn.execute(self._letters_sql, {"letters": document})
                too_old = sum(1 for status, _ in statuses if status == "expired")
                return len(statuses) - too_old, too_old
        except psycopg.Error as exc:
            await self.close()
            if (exc.sqlstate or "")[:2] in _PERMANENT_CLASSES:  # never DETAIL: it shows values
                primary = exc.diag.message_primary or ""
                raise UnstorableError(f"{type(exc).__name__} ({exc.sqlstate}): {primary}") from None
            raise StorageError(f"intake batch insert failed: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(psycopg.Error):
                await conn.close()
