"""`mailbus suppress add | remove | list | import`: the ``email_suppressions`` list.

Every address is stored lower-cased and compared as ``lower()`` on both sides, so
``Ana@Example.com`` and ``ana@example.com`` are one entry. ``import`` streams its CSV
(:mod:`mailbus.feedback.suppression_file`) in batches of 5,000, one transaction each: an import
stopped half-way keeps the batches it committed, and running it again adds only what is
missing. Invalid lines are reported on stderr with their line numbers and skipped; the
summary goes to stdout. psycopg errors become :class:`StorageError`.

An entry's scope follows its reason (``complaint`` and ``unsubscribed``: bulk mail only;
any other: all mail; see :mod:`mailbus.consumer.core.suppression`); ``list`` shows it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import psycopg

from mailbus.feedback.suppression_file import (
    BadLine,
    Entry,
    InvalidFileError,
    batches,
    normalise_address,
    read_entries,
)
from mailbus.kernel.errors import ConfigError, InvalidSendError, StorageError
from mailbus.kernel.json_output import print_document
from mailbus.kernel.settings import Settings
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "ImportSummary",
    "add",
    "import_file",
    "remove",
    "run_add",
    "run_import",
    "run_list",
    "run_remove",
    "search",
    "stops",
]

# What an entry of each scope stops (migration 0019 derives the scope from the reason).
_STOPS = {"all": "all mail", "bulk": "bulk mail only"}
BATCH_SIZE = 5000
MAX_REPORTED_LINES = 100


@contextmanager
def _connect(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    try:
        with psycopg.connect(database_url, connect_timeout=10) as conn:
            yield conn
    except psycopg.Error as exc:
        raise StorageError(f"suppression list: {exc}") from exc


def _queries() -> dict[str, str]:
    return load_queries("mailbus.feedback", "suppressions.sql")


def add(database_url: str, address: str, reason: str, source: str) -> tuple[str, bool, str]:
    """Suppress ``address``: (its normalised form, whether it was new, its scope). A bad
    address raises ConfigError naming ADDRESS; nothing is written."""
    try:
        normalised = normalise_address(address)
    except InvalidSendError as exc:
        raise ConfigError("ADDRESS", f"{address!r} {exc.problem}") from None
    with _connect(database_url) as conn:
        row = conn.execute(
            _queries()["add"], {"address": normalised, "reason": reason, "source": source}
        ).fetchone()
    assert row is not None  # INSERT … ON CONFLICT DO UPDATE returns its row
    return normalised, bool(row[0]), str(row[1])


def remove(database_url: str, address: str) -> list[str]:
    """Take every capitalisation of ``address`` off the list; the entries removed."""
    with _connect(database_url) as conn:
        return [r[0] for r in conn.execute(_queries()["remove"], {"address": address.strip()})]


def search(database_url: str, text: str, limit: int = 100) -> list[dict[str, Any]]:
    """Entries whose address contains ``text`` (any case), by address."""
    with _connect(database_url) as conn:
        rows = conn.execute(_queries()["search"], {"text": text.strip(), "limit": limit})
        return [_entry(row) for row in rows]


def stops(scope: str) -> str:
    """What an entry of ``scope`` stops, in words."""
    return _STOPS[scope]


def run_add(
    settings: Settings, address: str, reason: str, source: str = "cli", as_json: bool = False
) -> int:
    normalised, new, scope = add(settings.database_url, address, reason, source)
    if as_json:
        document = {"address": normalised, "added": new, "reason": reason, "scope": scope}
        print_document(document)
        return 0
    print(
        f"{normalised}: {'suppressed' if new else 'already suppressed'} (reason: {reason};"
        f" stops {_STOPS[scope]})"
    )
    return 0


def run_remove(settings: Settings, address: str, as_json: bool = False) -> int:
    removed = remove(settings.database_url, address)
    if as_json:
        print_document({"address": address.strip().lower(), "removed": removed})
        return 0
    if removed:
        print(f"{address.strip().lower()}: removed from the suppression list")
    else:
        print(f"{address.strip().lower()}: was not suppressed; nothing removed")
    return 0


def run_list(settings: Settings, as_json: bool, out: TextIO = sys.stdout) -> int:
    """Every entry, by address, streamed through a server-side cursor."""
    with (
        _connect(settings.database_url) as conn,
        conn.cursor(name="mailbus_suppressions") as cursor,
    ):
        cursor.itersize = 2000
        cursor.execute(_queries()["list"])
        if as_json:
            out.write("[")
            for number, row in enumerate(cursor):
                out.write(("," if number else "") + "\n" + json.dumps(_entry(row)))
            out.write("\n]\n")
        else:
            out.write("address\treason\tsource\tcreated_at\tscope\n")
            for row in cursor:
                entry = _entry(row)
                out.write(
                    f"{entry['address']}\t{entry['reason']}\t{entry['source']}"
                    f"\t{entry['created_at']}\t{entry['scope']}\n"
                )
    return 0


def _entry(row: tuple[Any, ...]) -> dict[str, Any]:
    address, reason, scope, source, created_at = row
    created = created_at.isoformat() if isinstance(created_at, datetime) else created_at
    return {
        "address": address,
        "reason": reason,
        "scope": scope,
        "source": source,
        "created_at": created,
    }


class ImportSummary:
    def __init__(self) -> None:
        self.read = 0
        self.added = 0
        self.invalid = 0

    @property
    def already(self) -> int:
        return self.read - self.invalid - self.added

    def __str__(self) -> str:
        return (
            f"{self.read} addresses read, {self.added} added, {self.already} already"
            f" suppressed, {self.invalid} invalid (skipped)"
        )


def import_file(
    conn: psycopg.Connection[Any],
    lines: TextIO,
    *,
    reason: str,
    source: str,
    on_invalid: Callable[[BadLine], None],
    batch_size: int = BATCH_SIZE,
) -> ImportSummary:
    """Import the CSV ``lines`` over ``conn``; each batch commits on its own; each line
    that is no entry is skipped and handed to ``on_invalid``."""
    summary = ImportSummary()
    query = _queries()["add_batch"]
    for batch in batches(read_entries(lines), batch_size):
        entries: list[Entry] = []
        for item in batch:
            summary.read += 1
            if isinstance(item, BadLine):
                summary.invalid += 1
                on_invalid(item)
            else:
                entries.append(item)
        if entries:
            with conn.transaction():
                cursor = conn.execute(
                    query,
                    {
                        "addresses": [entry.address for entry in entries],
                        "reasons": [entry.reason for entry in entries],
                        "default_reason": reason,
                        "source": source,
                    },
                )
                summary.added += cursor.rowcount
    return summary


def run_import(
    settings: Settings, path: str, reason: str, source: str = "import", as_json: bool = False
) -> int:
    """Import the file; its first MAX_REPORTED_LINES invalid lines are reported as they
    are met on stderr, or with ``as_json`` in the document (docs/reference/cli.md)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError("FILE.csv", f"no such file: {path}")
    reported: list[BadLine] = []

    def skipped(bad: BadLine) -> None:
        if len(reported) < MAX_REPORTED_LINES:
            reported.append(bad)
            if not as_json:
                sys.stderr.write(f"line {bad.line}: {bad.text!r} {bad.problem}; skipped\n")

    with (
        file.open(newline="", encoding="utf-8-sig", errors="replace") as lines,
        _connect(settings.database_url) as conn,
    ):
        conn.autocommit = True  # each batch is its own transaction
        try:
            summary = import_file(conn, lines, reason=reason, source=source, on_invalid=skipped)
        except InvalidFileError as exc:
            raise ConfigError("FILE.csv", f"{path}: {exc}") from None
    if as_json:
        document = {
            "file": path, "read": summary.read, "added": summary.added,
            "already": summary.already, "invalid": summary.invalid,
            "invalid_lines": [asdict(bad) for bad in reported],  # the first ones
        }  # fmt: skip
        print_document(document)
        return 0
    if summary.invalid > len(reported):
        sys.stderr.write(f"... and {summary.invalid - len(reported)} more invalid lines\n")
    print(f"imported {path}: {summary}")
    return 0
