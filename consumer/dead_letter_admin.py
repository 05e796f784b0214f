"""`mailbus dlq list / show / replay`: look at dead letters and put their sends back.

A replay moves one send along the single edge reserved for it, ``failed → pending``
(:mod:`consumer.core.states`), with a fresh attempt budget. Each dead letter is replayed in
one transaction of three guarded statements: claim the dead letter (``replayed_at IS
NULL``), reset the send (``status = 'failed'``), write the audit row. When a guard matches
nothing the transaction is rolled back and the letter counted as skipped, so two replays
run at once replay each letter once, and a send that is not failed (an accepted one above
all) is never reset: a replay cannot cause a second send of an accepted key.

The pure parts (option parsing, replay order, tables) come first; the PostgreSQL adapter,
whose psycopg errors become :class:`StorageError`, and the commands follow.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import psycopg
from psycopg.rows import dict_row

from mailbus.errors import ConfigError, MailbusError, StorageError
from mailbus.settings import Settings
from mailbus.sqlfiles import load_queries

__all__ = [
    "DeadLetterNotFound",
    "Letter",
    "LetterFilter",
    "Progress",
    "format_table",
    "letters_table",
    "parse_choices",
    "parse_letter_id",
    "parse_rate",
    "parse_since",
    "print_list",
    "print_show",
    "replay_order",
    "run_replay",
    "skip_reason",
]

PRIORITIES = ("p0", "p1", "p2")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|min|m|h|hour)\s*$")
_PER = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0}


class DeadLetterNotFound(MailbusError):
    """`dlq show` was given an id that names no dead letter."""


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: an ISO-8601 time (naive means UTC) or an age such as ``30m``, ``2h``, ``7d``."""
    age = _AGE.match(text)
    if age:
        return now - timedelta(seconds=float(age.group(1)) * _UNITS[age.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            "--since", f"expected an ISO-8601 time or an age like 30m, 2h, 7d; got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_rate(text: str) -> float:
    """``--rate N/min`` (also ``N/s``, ``N/h``) as replays per second."""
    rate = _RATE.match(text)
    if not rate or float(rate.group(1)) <= 0:
        raise ConfigError("--rate", f"expected a positive N/min such as 60/min; got {text!r}")
    return float(rate.group(1)) / _PER[rate.group(2)]


def parse_letter_id(text: str) -> int:
    """``dlq show ID``: a dead letter's id, a positive whole number."""
    if not text.strip().isdigit() or int(text) == 0:
        raise ConfigError("ID", f"expected a dead letter's id (a positive number); got {text!r}")
    return int(text)


def parse_choices(option: str, text: str | None, allowed: Sequence[str] = ()) -> list[str] | None:
    """A filter value, one or a comma list; None when the option was not given."""
    if text is None:
        return None
    chosen = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [value for value in chosen if allowed and value not in allowed]
    if not chosen or bad:
        expected = ", ".join(allowed) if allowed else "a value"
        raise ConfigError(option, f"expected {expected} or a comma list; got {text!r}")
    return chosen


@dataclass(frozen=True)
class LetterFilter:
    reasons: list[str] | None = None
    priorities: list[str] | None = None
    templates: list[str] | None = None
    since: datetime | None = None
    include_replayed: bool = False

    @classmethod
    def from_options(
        cls,
        reason: str | None = None,
        priority: str | None = None,
        template: str | None = None,
        since: str | None = None,
        include_replayed: bool = False,
        now: datetime | None = None,
    ) -> LetterFilter:
        return cls(
            reasons=parse_choices("--reason", reason),
            priorities=parse_choices("--priority", priority, PRIORITIES),
            templates=parse_choices("--template", template),
            since=None if since is None else parse_since(since, now or datetime.now(UTC)),
            include_replayed=include_replayed,
        )


@dataclass(frozen=True)
class Letter:
    """One row of `dlq list`: the dead letter and its send's status now."""

    id: int
    created_at: datetime
    priority: str | None
    template: str | None
    reason: str
    status_code: int | None
    attempts: int
    dedupe_key: str | None
    error: str
    send_id: int | None
    replayed_at: datetime | None
    send_status: str | None


def replay_order(letters: Iterable[Letter]) -> list[Letter]:
    """P0 first, then P1, P2 (letters without a priority last), oldest first within each."""
    rank = {p: n for n, p in enumerate(PRIORITIES)}
    return sorted(letters, key=lambda x: (rank.get(x.priority or "", 9), x.created_at, x.id))


def skip_reason(letter: Letter) -> str | None:
    """Why a replay would skip this letter (the guards' verdict, predicted); None: replay it."""
    if letter.replayed_at is not None:
        return "already replayed"
    if letter.send_id is None:
        return "no send row (undecodable message)"
    if letter.send_status != "failed":
        return f"send {letter.send_status}, not failed"
    return None


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str | None, width: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns as wide as their widest cell; None shows as ``-``."""
    cells = [list(headers)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[n]) for row in cells) for n in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def letters_table(letters: Iterable[Letter]) -> str:
    headers = ("id", "created (UTC)", "prio", "template", "reason", "code", "att", "dedupe key")
    rows = [
        (
            x.id,
            _when(x.created_at),
            x.priority,
            x.template,
            x.reason,
            x.status_code,
            x.attempts,
            _short(x.dedupe_key, 40),
            _short(x.error, 48),
        )
        for x in letters
    ]
    return format_table((*headers, "error"), rows)


class Progress:
    """``[####....] 40/100`` redrawn in place on a terminal; otherwise a plain line per
    tenth of the work, or every ``every_s`` seconds when the work goes slowly."""

    def __init__(
        self,
        total: int,
        stream: TextIO,
        width: int = 30,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.stream, self.width = total, stream, width
        self.tty = stream.isatty()
        self._every_s, self._clock = every_s, clock
        self._last_tenth, self._last_line = 0, clock()
        self._done = 0

    def render(self, done: int) -> str:
        filled = self.width if not self.total else self.width * done // self.total
        return f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total}"

    def update(self, done: int) -> None:
        self._done = done
        if self.tty:
            end = "\n" if done >= self.total else ""
            self.stream.write(f"\r{self.render(done)}{end}")
        else:
            tenth = 10 * done // self.total if self.total else 10
            slow = self._clock() - self._last_line >= self._every_s
            if tenth == self._last_tenth and done < self.total and not slow:
                return
            self._last_tenth, self._last_line = tenth, self._clock()
            self.stream.write(f"replay progress: {done}/{self.total}\n")
        self.stream.flush()

    def finish(self) -> None:
        """End a bar left unfinished (the replay was stopped) with a newline."""
        if self.tty and 0 < self._done < self.total:
            self.stream.write("\n")
            self.stream.flush()


class DeadLetterStore:
    """The PostgreSQL side: filtered reads, one dead letter's story, guarded replays."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._q = load_queries("consumer", "dead_letters.sql")

    def _all(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        return self._conn.execute(self._q[query], params).fetchall()

    def find(self, where: LetterFilter, limit: int | None) -> tuple[list[Letter], int]:
        params = asdict(where)
        rows = self._all("select_letters", **params, limit=limit)
        return [Letter(*row[:-1]) for row in rows], (rows[0][-1] if rows else 0)

    def _dicts(self, query: str, **params: Any) -> list[dict[str, Any]]:
        with self._conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(self._q[query], params).fetchall()

    def story(self, letter_id: int) -> dict[str, Any]:
        """The dead letter, its send now, the send's attempts and the letter's replays."""
        found = self._dicts("letter_by_id", id=letter_id)
        if not found:
            raise DeadLetterNotFound(f"no dead letter with id {letter_id}")
        send_id = found[0]["send_id"]
        sends = [] if send_id is None else self._dicts("send_by_id", id=send_id)
        return {
            "dead_letter": found[0],
            "send": sends[0] if sends else None,
            "attempts": [] if send_id is None else self._dicts("attempts_of_send", send_id=send_id),
            "replays": self._dicts("replays_of_letter", id=letter_id),
        }

    def replay(self, letter_id: int, who: str, why: str, wake: bool) -> str | None:
        """Replay one dead letter in one transaction; the skip reason when a guard said no."""
        skipped: str | None = None
        with self._conn.transaction():
            claimed = self._conn.execute(self._q["mark_replayed"], {"id": letter_id}).fetchone()
            if claimed is None:
                skipped = "already replayed"
            elif claimed[0] is None:
                skipped = "no send row (undecodable message)"
            elif self._conn.execute(self._q["reset_send"], {"send_id": claimed[0]}).fetchone():
                params = {"id": letter_id, "send_id": claimed[0], "who": who, "why": why}
                self._conn.execute(self._q["insert_replay"], params)
                if wake:
                    self._conn.execute(self._q["wake_relay"])
                return None
            else:
                status = self._all("send_status", send_id=claimed[0])
                skipped = f"send {status[0][0] if status else 'missing'}, not failed"
            raise psycopg.Rollback()
        return skipped

    def wake_relay(self) -> None:
        self._conn.execute(self._q["wake_relay"])


@contextmanager
def _store(settings: Settings) -> Iterator[DeadLetterStore]:
    try:
        with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5) as conn:
            yield DeadLetterStore(conn)
    except psycopg.Error as exc:
        raise StorageError(f"dead letters: {exc}") from exc


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def print_list(settings: Settings, where: LetterFilter, limit: int | None, as_json: bool) -> int:
    with _store(settings) as store:
        letters, total = store.find(where, limit)
    if as_json:
        print(json.dumps([_jsonable(asdict(x)) for x in letters], indent=2))
        return 0
    if not letters:
        print("no dead letters match")
        return 0
    print(letters_table(letters))
    shown = f"{len(letters)} of {total}" if total > len(letters) else f"{total}"
    kind = "dead letters" if where.include_replayed else "dead letters not yet replayed"
    print(f"{shown} {kind}")
    return 0


def print_show(settings: Settings, letter_id: int, as_json: bool) -> int:
    with _store(settings) as store:
        story = store.story(letter_id)
    if as_json:
        print(json.dumps(_jsonable(story), indent=2))
        return 0
    d, send = story["dead_letter"], story["send"]
    code = "" if d["status_code"] is None else f" (status {d['status_code']})"
    origin = f"{d['original_topic']} [{d['original_partition']}] @ {d['original_offset']}"
    lines = [
        f"dead letter {d['id']}"
        + (f", replayed {_when(d['replayed_at'])}" if d["replayed_at"] else ", not replayed"),
        f"  created     {_when(d['created_at'])} UTC",
        f"  reason      {d['reason']}{code}",
        f"  error       {d['error'] or '-'}",
        f"  attempts    {d['attempts']}",
        f"  key         {d['dedupe_key'] or '-'}  ({d['priority'] or '-'}, {d['template'] or '-'})",
        f"  from        {origin if d['original_topic'] else '-'}",
    ]
    if send is None:
        raw = d["original_value"]
        lines.append(f"  send        none (undecodable: {len(raw or b'')} bytes of value)")
    else:
        lines.append(
            f"  send        id {send['id']}: now {send['status']}, {send['attempts']} attempt(s)"
            + (f", last error {_short(send['last_error'], 60)}" if send["last_error"] else "")
        )
        history = [
            (
                a["attempt"],
                _when(a["at"]),
                a["outcome"],
                a["status_code"],
                None if a["latency_ms"] is None else f"{a['latency_ms']} ms",
                a["reason"],
            )
            for a in story["attempts"]
        ]
        lines += ["", "attempt history:"]
        lines.append(
            format_table(("attempt", "at (UTC)", "outcome", "code", "latency", "reason"), history)
            if history
            else "  none recorded"
        )
    if story["replays"]:
        rows = [(_when(r["at"]), r["replayed_by"], r["reason"]) for r in story["replays"]]
        lines += ["", "replays:", format_table(("at (UTC)", "by", "why"), rows)]
    print("\n".join(lines))
    return 0


def _operator() -> str:
    try:
        return os.environ.get("MAILBUS_OPERATOR") or getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return f"uid {os.getuid()}"


def _summary(replayed: int, skipped: Counter[str], dry_run: bool = False) -> str:
    why = "; ".join(f"{reason}: {n}" for reason, n in sorted(skipped.items()))
    verbs = ("dry run, nothing changed: would replay", "would skip") if dry_run else None
    replay_verb, skip_verb = verbs or ("replayed", "skipped")
    text = f"{replay_verb} {replayed}, {skip_verb} {sum(skipped.values())}"
    return text + (f" ({why})" if why else "")


def run_replay(
    settings: Settings,
    where: LetterFilter,
    *,
    why: str,
    rate: float | None = None,
    dry_run: bool = False,
    limit: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Replay the matching dead letters not yet replayed, P0 first; print a summary."""
    if not why.strip():
        raise ConfigError("--why", "must not be empty: it is recorded in the audit")
    stop = stop or threading.Event()
    with _store(settings) as store:
        found, _ = store.find(replace(where, include_replayed=False), None)
        letters = replay_order(found)[:limit]
        if dry_run:
            verdicts = [(x, skip_reason(x)) for x in letters]
            chosen = [x for x, reason in verdicts if reason is None]
            if chosen:
                print(letters_table(chosen))
            skipped = Counter(reason for _, reason in verdicts if reason is not None)
            print(_summary(len(chosen), skipped, dry_run=True))
            return 0
        who, progress = _operator(), Progress(len(letters), sys.stderr)
        replayed, skipped, last_wake, next_at = 0, Counter[str](), -math.inf, time.monotonic()
        for done, letter in enumerate(letters, start=1):
            if stop.wait(max(0.0, next_at - time.monotonic()) if rate else 0.0):
                break
            wake = time.monotonic() - last_wake >= 0.5
            reason = store.replay(letter.id, who, why, wake)
            if reason is None:
                replayed += 1
                last_wake = time.monotonic() if wake else last_wake
                next_at = time.monotonic() + (1 / rate if rate else 0)
            else:
                skipped[reason] += 1
            progress.update(done)
        progress.finish()
        if replayed:
            store.wake_relay()
    left = len(letters) - replayed - sum(skipped.values())
    print(_summary(replayed, skipped) + (f"; stopped, {left} left" if left else ""))
    return 0
