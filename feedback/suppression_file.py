"""Reading a suppression CSV (``mailbus suppress import``), pure and streaming.

The first row is a header naming an ``email`` column and optionally a ``reason`` column
(any order, any case, other columns ignored). Every later row is one address; it comes out
lower-cased as an :class:`Entry`, or as a :class:`BadLine` with its line number when the
address is not one plain mailbox. Blank lines are skipped. Rows are yielded one at a time,
so a file of millions of lines is never held in memory; :func:`batches` groups them.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

from mailbus.kernel.errors import InvalidSendError, MailbusError
from mailbus_client.send_request import validate_address

__all__ = [
    "BadLine",
    "Entry",
    "InvalidFileError",
    "batches",
    "normalise_address",
    "read_entries",
]

MAX_REASON_LENGTH = 200
_T = TypeVar("_T")


class InvalidFileError(MailbusError):
    """The file cannot be imported at all (no header, no ``email`` column)."""


@dataclass(frozen=True)
class Entry:
    line: int
    address: str  # lower-cased
    reason: str | None


@dataclass(frozen=True)
class BadLine:
    line: int
    text: str
    problem: str


def normalise_address(text: str) -> str:
    """``text`` stripped and lower-cased when it is one plain mailbox, else
    :class:`InvalidSendError`."""
    return validate_address(text.strip()).lower()


def read_entries(lines: Iterable[str]) -> Iterator[Entry | BadLine]:
    """Entries and bad lines of a CSV given as lines (an open file, ``newline=""``)."""
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise InvalidFileError("the file is empty; expected a header row 'email[,reason]'")
    columns = [name.strip().lower().lstrip("\ufeff") for name in header]
    if "email" not in columns:
        raise InvalidFileError(
            f"the header row names no 'email' column (got {','.join(header)[:200]!r})"
        )
    email_at = columns.index("email")
    reason_at = columns.index("reason") if "reason" in columns else None
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue
        line = reader.line_num
        text = row[email_at] if email_at < len(row) else ""
        try:
            address = normalise_address(text)
        except InvalidSendError as exc:
            yield BadLine(line, text[:200], exc.problem)
            continue
        reason = None
        if reason_at is not None and reason_at < len(row):
            reason = " ".join(row[reason_at].split())[:MAX_REASON_LENGTH] or None
        yield Entry(line, address, reason)


def batches(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    """``items`` in lists of at most ``size``."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
