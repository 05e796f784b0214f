"""Where mailbus's tables live: one schema of the database (MAILBUS_DB_SCHEMA, default
``mailbus``), reached through the connection's ``search_path``.

Every process connects with :func:`with_search_path`'s URL: libpq passes its ``options``
(``-c search_path=<schema>,public``) at start-up, so the ~35 places that connect need no
statement of their own. ``public`` stays on the path after the schema only so that an
extension installed there before mailbus had its schema (``pg_trgm`` of an upgraded
install, or the application's own) keeps its operators; nothing of mailbus is created or
granted there (docs/installation.md#the-database).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from mailbus_client.db_schema import DEFAULT_SCHEMA, parse_schema

__all__ = ["DEFAULT_SCHEMA", "parse_schema", "search_path", "with_search_path"]

# one libpq option word: backslash escapes the next character (a space included)
_WORD = re.compile(r"(?:\\.|\S)+")
_SEARCH_PATH = re.compile(r"(?:-c\s*|--)search[_-]path=", re.IGNORECASE)


def search_path(schema: str) -> str:
    """The ``search_path`` of a mailbus session: its schema, then ``public``."""
    return f"{schema}, public"


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose libpq ``options`` set ``search_path`` to :func:`search_path`, after
    the options the URL already gives (a ``search_path`` among them is replaced)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = " ".join(value for key, value in query if key == "options")
    kept = _without_search_path(_WORD.findall(given))
    kept.append(f"-csearch_path={search_path(schema).replace(' ', '')}")
    rest = [(key, value) for key, value in query if key != "options"]
    encoded = urlencode([*rest, ("options", " ".join(kept))], quote_via=quote)
    return urlunsplit(parts._replace(query=encoded))


def _without_search_path(words: list[str]) -> list[str]:
    """``words`` less any ``-c search_path=...``, ``-csearch_path=...`` or
    ``--search_path=...`` (with its ``-c`` when that is a word of its own)."""
    kept: list[str] = []
    for word in words:
        if _SEARCH_PATH.match(word):
            continue
        if kept and kept[-1] == "-c" and word.lower().startswith(("search_path=", "search-path=")):
            kept.pop()
            continue
        kept.append(word)
    return kept
