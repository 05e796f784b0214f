"""Reading an audience CSV: a header ``user_id,email[,more variables]``, then one recipient
a line. Streaming: one record at a time, never the whole file in memory.

A bad header raises :class:`CampaignInputError` (nothing can be imported). A bad line becomes a
:class:`Rejected` naming its line and the problem, and the reading goes on: one bad line
loses only itself. Duplicate user ids are found later, in PostgreSQL (see
``store.import_audience``), so memory does not grow with the audience.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, NamedTuple

from mailbus.campaigns.errors import CampaignInputError
from mailbus.kernel.errors import InvalidSendError
from mailbus_client.send_request import validate_address

__all__ = [
    "MAX_USER_ID_LENGTH",
    "Audience",
    "Recipient",
    "Rejected",
    "check_recipient",
    "open_audience",
]

# campaign-{id}-user-{user_id} must stay a valid dedupe key (printable ASCII, <= 200).
MAX_USER_ID_LENGTH = 160
_USER_ID = re.compile(r"^[\x21-\x7e]+$")
_LINE_BREAKS = re.compile(r"[\r\n\x00]")


class Recipient(NamedTuple):  # a tuple: a million of them are made, one at a time
    line: int  # where the record starts in the file (the header is line 1)
    user_id: str
    email: str
    variables: dict[str, str]  # user_id and every extra column


@dataclass(frozen=True)
class Rejected:
    line: int
    problem: str


class Audience:
    """An opened CSV: ``columns`` (the variables' names) and ``records()``."""

    last_key: str | None = None  # a CSV resumes by line number alone

    def __init__(self, stream: IO[bytes]) -> None:
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="surrogateescape", newline="")
        self._reader = csv.reader(text, strict=True)
        header = self._header()
        lowered = [name.lower() for name in header]
        for required in ("user_id", "email"):
            if required not in lowered:
                raise CampaignInputError(
                    "line 1",
                    f"the header has no {required!r} column"
                    f" (found: {','.join(header) or 'nothing'});"
                    " expected user_id,email[,more variables]",
                )
        self._user_id = lowered.index("user_id")
        self._email = lowered.index("email")
        self._extra = [
            (i, name) for i, name in enumerate(header) if lowered[i] not in ("user_id", "email")
        ]
        self.columns = ["user_id", *(name for _, name in self._extra)]
        self._width = len(header)

    def _header(self) -> list[str]:
        try:
            row = next(self._reader, None)
        except csv.Error as exc:
            raise CampaignInputError("line 1", f"unreadable header: {exc}") from None
        if not row or all(not cell.strip() for cell in row):
            raise CampaignInputError(
                "line 1", "no header row; expected user_id,email[,more variables]"
            )
        header = [cell.strip() for cell in row]
        seen: set[str] = set()
        for position, name in enumerate(header, 1):
            if not name:
                raise CampaignInputError("line 1", f"column {position} of the header has no name")
            if _LINE_BREAKS.search(name) or not _is_utf8(name):
                raise CampaignInputError(
                    "line 1", f"column {position} of the header is not a plain name"
                )
            if name.lower() in seen:
                raise CampaignInputError("line 1", f"column {name!r} appears twice in the header")
            seen.add(name.lower())
        return header

    def records(
        self, after: int = 0, after_key: str | None = None
    ) -> Iterator[Recipient | Rejected]:
        """Every record after line ``after`` (lines up to it are read, not checked);
        ``after_key`` is for a SQL audience's keyset and ignored here."""
        reader = self._reader
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                if start > after:
                    yield Rejected(start, f"unreadable CSV: {exc}")
                continue
            if start <= after:
                continue  # imported by an earlier run
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # a blank line
            yield self._recipient(start, row)

    def _recipient(self, line: int, row: list[str]) -> Recipient | Rejected:
        if len(row) != self._width:
            return Rejected(line, f"expected {self._width} fields, found {len(row)}")
        extras = [(name, row[index]) for index, name in self._extra]
        return check_recipient(line, row[self._user_id], row[self._email], extras)


def check_recipient(
    line: int, user_id: str, email: str, extras: list[tuple[str, str]]
) -> Recipient | Rejected:
    """One audience record checked (pure): the same rules for a CSV line and a SQL row."""
    joined = "\x1f".join([user_id, email, *(value for _, value in extras)])
    if _LINE_BREAKS.search(joined):
        return Rejected(line, "a field contains CR, LF or NUL (header injection)")
    if not _is_utf8(joined):
        return Rejected(line, "not valid UTF-8")
    user_id = user_id.strip()
    if not user_id:
        return Rejected(line, "user_id: empty")
    if len(user_id) > MAX_USER_ID_LENGTH or not _USER_ID.match(user_id):
        return Rejected(
            line,
            f"user_id: must be printable ASCII without spaces, at most"
            f" {MAX_USER_ID_LENGTH} characters",
        )
    email = email.strip()
    try:
        validate_address(email)
    except InvalidSendError as exc:
        return Rejected(line, f"email {email[:80]!r}: {exc.problem}")
    variables = {"user_id": user_id}
    variables.update(extras)
    return Recipient(line, user_id, email, variables)


def open_audience(stream: IO[bytes]) -> Audience:
    return Audience(stream)


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte that was not UTF-8, kept as a lone surrogate
        return False
    return True
