"""An audience read from the application's own tables: ``--audience-sql "SELECT user_id,
email, ... FROM app_table"``.

The query is checked first (it must return ``user_id`` and ``email`` columns; a bad query
or missing column raises :class:`CampaignInputError` naming ``--audience-sql``), then read
page by page with keyset pagination on ``user_id`` (``WHERE user_id > last ORDER BY
user_id LIMIT page``): one page in memory at a time, never the whole result. Every page is
read in one ``READ ONLY``, ``REPEATABLE READ`` transaction of its own connection: the
audience is one consistent snapshot, and the operator's query cannot write anything. The
query is exactly one SELECT: every statement built around it goes by the extended query
protocol, under which PostgreSQL refuses a second command (``...; COMMIT; CREATE ...``
would otherwise end the read-only transaction and run outside it).

Each row is checked by the CSV's rules (:func:`mailbus.campaigns.audience.check_recipient`); a
bad row becomes a :class:`Rejected` naming its position in the result. Rows whose
``user_id`` is NULL are not part of the audience; a repeated ``user_id`` is kept once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from mailbus.campaigns.audience import Recipient, Rejected, check_recipient
from mailbus.campaigns.errors import CampaignInputError
from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = ["PAGE_SIZE", "SqlAudience"]

PAGE_SIZE = 20_000  # rows per page: a few MB in memory whatever the audience's size


class SqlAudience:
    """An opened SQL audience: ``columns`` (the variables' names) and ``records()``; use
    as a context manager (it holds a read-only connection)."""

    def __init__(self, database_url: str, query: str, page_size: int = PAGE_SIZE) -> None:
        text = query.strip().rstrip(";").strip()
        if not text:
            raise CampaignInputError("--audience-sql", "empty query")
        self._page_size = page_size
        self.last_key: str | None = None
        try:
            self._conn = psycopg.connect(database_url)
        except psycopg.Error as exc:
            raise StorageError(f"--audience-sql: cannot connect: {exc}") from None
        self._conn.read_only = True
        self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        # psycopg reads %s in the text as a placeholder: the operator's % are doubled.
        composed = sql.SQL(text.replace("%", "%%"))
        try:
            names = self._describe(composed)
        except BaseException:
            self._conn.close()
            raise
        lowered = [name.lower() for name in names]
        self._user_id = lowered.index("user_id")
        self._email = lowered.index("email")
        self._extra = [
            (i, name) for i, name in enumerate(names) if lowered[i] not in ("user_id", "email")
        ]
        self.columns = ["user_id", *(name for _, name in self._extra)]
        queries = load_queries("mailbus.campaigns", "audience_sql.sql")
        column = sql.Identifier(names[self._user_id])
        self._first = sql.SQL(queries["first_page"]).format(query=composed, user_id=column)
        self._next = sql.SQL(queries["next_page"]).format(query=composed, user_id=column)

    def _describe(self, composed: sql.Composable) -> list[str]:
        describe = sql.SQL(load_queries("mailbus.campaigns", "audience_sql.sql")["describe"])
        try:  # prepared: the extended protocol, one command only (the pages have parameters)
            cursor = self._conn.execute(describe.format(query=composed), prepare=True)
        except psycopg.errors.SyntaxError as exc:
            if "multiple commands" in str(exc):
                raise CampaignInputError(
                    "--audience-sql", "exactly one SELECT is accepted, not several statements"
                ) from None
            raise CampaignInputError("--audience-sql", _first_line(exc)) from None
        except psycopg.Error as exc:
            raise CampaignInputError("--audience-sql", _first_line(exc)) from None
        names = [column.name for column in cursor.description or ()]
        lowered = [name.lower() for name in names]
        for required in ("user_id", "email"):
            if required not in lowered:
                raise CampaignInputError(
                    "--audience-sql",
                    f"the query returns no {required!r} column"
                    f" (found: {','.join(names) or 'nothing'});"
                    " expected SELECT user_id, email[, more variables] FROM ..."
                )
        for name in lowered:
            if lowered.count(name) > 1:
                raise CampaignInputError("--audience-sql", f"column {name!r} appears twice")
        return names

    def records(
        self, after: int = 0, after_key: str | None = None
    ) -> Iterator[Recipient | Rejected]:
        """Every row after keyset key ``after_key`` (None: from the first), positions
        counted on from ``after``; ``last_key`` follows the rows yielded."""
        position = after
        last: Any = after_key  # the text form: PostgreSQL reads it as the column's type
        while True:
            try:
                if last is None:
                    page = self._conn.execute(self._first, {"page": self._page_size}).fetchall()
                else:
                    params = {"after": last, "page": self._page_size}
                    page = self._conn.execute(self._next, params).fetchall()
            except psycopg.OperationalError as exc:  # the connection, not the query
                raise StorageError(f"--audience-sql: {_first_line(exc)}") from None
            except psycopg.Error as exc:
                raise CampaignInputError("--audience-sql", _first_line(exc)) from None
            for row in page:
                position += 1
                self.last_key = str(row[self._user_id])
                extras = [(name, _text(row[index])) for index, name in self._extra]
                yield check_recipient(
                    position, _text(row[self._user_id]), _text(row[self._email]), extras
                )
            if len(page) < self._page_size:
                return
            last = page[-1][self._user_id]
            del page

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SqlAudience:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _first_line(exc: psycopg.Error) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
