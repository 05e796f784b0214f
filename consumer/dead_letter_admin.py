"""`mailbus dlq list / show / replay`: look at dead letters and put their sends back.

A replay moves one send along the single edge reserved for it, ``failed → pending``
(:mod:`mailbus.consumer.core.states`), with a fresh attempt budget. Each dead letter is replayed in
one transaction of three guarded statements: claim the dead letter (``replayed_at IS
NULL``), reset the send (``status = 'failed'``), write the audit row. When a guard matches
nothing the transaction is rolled back and the letter counted as skipped, so two replays
run at once replay each letter once, and a send that is not failed (an accepted one above
all) is never reset: a replay cannot cause a second send of an accepted key.

An intake dead letter has no send row but keeps the event: its replay, in the same
transaction after the claim, maps the event again through the intake
(:class:`IntakeRemap`, handed in by the composition root: ``mailbus.intake.replay``), links
the row it inserts (or the key's existing row) to the letter and audits it; when the
intake refuses the event again, the transaction is rolled back and the letter stays.

This module is the PostgreSQL adapter, whose psycopg errors become :class:`StorageError`,
and the commands; option parsing, replay order and tables are in
:mod:`mailbus.consumer.dead_letter_views`.
"""

from __future__ import annotations

import getpass
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from mailbus.consumer.dead_letter_views import (
    Letter,
    LetterFilter,
    format_table,
    jsonable,
    letters_table,
    replay_order,
    replay_summary,
    shorten,
    skip_reason,
    utc_time,
)
from mailbus.kernel.errors import ConfigError, RefusedError, StorageError
from mailbus.kernel.json_output import print_document
from mailbus.kernel.progress import TerminalProgress
from mailbus.kernel.settings import Settings
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "DeadLetterNotFound",
    "DeadLetterStore",
    "IntakeRemap",
    "connect_store",
    "operator_name",
    "print_list",
    "print_show",
    "replay_candidates",
    "replay_paced",
    "run_replay",
]


IntakeRemap = Callable[[psycopg.Connection[Any], bytes | None], int | str]
"""Maps an intake dead letter's stored event again and inserts its row in the connection's
transaction: the send's id, or why the intake refuses the event still."""


class DeadLetterNotFound(RefusedError):
    """`dlq show` was given an id that names no dead letter."""


class DeadLetterStore:
    """The PostgreSQL side: filtered reads, one dead letter's story, guarded replays."""

    def __init__(self, conn: psycopg.Connection[Any], intake: IntakeRemap | None = None) -> None:
        self._conn = conn
        self._intake = intake
        self._q = load_queries("mailbus.consumer", "dead_letters.sql")

    def _all(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        return self._conn.execute(self._q[query], params).fetchall()

    def find(self, where: LetterFilter, limit: int | None) -> tuple[list[Letter], int]:
        params = asdict(where)
        rows = self._all("select_letters", **params, limit=limit)
        return [Letter(*row[:-1]) for row in rows], (rows[0][-1] if rows else 0)

    def _dicts(self, query: str, **params: Any) -> list[dict[str, Any]]:
        with self._conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(self._q[query], params).fetchall()

    def story(self, letter_id: int, raw: bool = True) -> dict[str, Any]:
        """The dead letter (with its stored Kafka key and value if ``raw``), its send now,
        the send's attempts and the letter's replays."""
        found = self._dicts("letter_by_id", id=letter_id)
        if not found:
            raise DeadLetterNotFound(f"no dead letter with id {letter_id}")
        if raw:
            found[0].update(self._dicts("letter_raw", id=letter_id)[0])
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
                event = self._intake_event(letter_id) if claimed[1] else None
                if event is None or self._intake is None:
                    skipped = "no send row (undecodable message)"
                elif isinstance(send := self._intake(self._conn, event), int):
                    self._conn.execute(self._q["link_send"], {"id": letter_id, "send_id": send})
                    self._audit(letter_id, send, who, why, wake)
                    return None
                else:
                    skipped = send
            elif self._conn.execute(self._q["reset_send"], {"send_id": claimed[0]}).fetchone():
                self._audit(letter_id, claimed[0], who, why, wake)
                return None
            else:
                status = self._all("send_status", send_id=claimed[0])
                skipped = f"send {status[0][0] if status else 'missing'}, not failed"
            raise psycopg.Rollback()
        return skipped

    def _intake_event(self, letter_id: int) -> bytes | None:
        """An intake dead letter's stored event (read only when an intake remaps it)."""
        if self._intake is None:
            return None
        value: bytes | None = self._all("letter_raw", id=letter_id)[0][1]
        return value

    def _audit(self, letter_id: int, send_id: int, who: str, why: str, wake: bool) -> None:
        params = {"id": letter_id, "send_id": send_id, "who": who, "why": why}
        self._conn.execute(self._q["insert_replay"], params)
        if wake:
            self._conn.execute(self._q["wake_relay"])

    def wake_relay(self) -> None:
        self._conn.execute(self._q["wake_relay"])


@contextmanager
def connect_store(
    database_url: str, intake: IntakeRemap | None = None
) -> Iterator[DeadLetterStore]:
    """A store on its own autocommit connection; psycopg errors become StorageError.
    ``intake`` maps intake dead letters' events again (else they are skipped)."""
    try:
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            yield DeadLetterStore(conn, intake)
    except psycopg.Error as exc:
        raise StorageError(f"dead letters: {exc}") from exc


def print_list(settings: Settings, where: LetterFilter, limit: int | None, as_json: bool) -> int:
    with connect_store(settings.database_url) as store:
        letters, total = store.find(where, limit)
    if as_json:
        print_document([jsonable(asdict(x)) for x in letters])
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
    with connect_store(settings.database_url) as store:
        story = store.story(letter_id)
    if as_json:
        print_document(jsonable(story))
        return 0
    d, send = story["dead_letter"], story["send"]
    code = "" if d["status_code"] is None else f" (status {d['status_code']})"
    origin = f"{d['original_topic']} [{d['original_partition']}] @ {d['original_offset']}"
    lines = [
        f"dead letter {d['id']}"
        + (f", replayed {utc_time(d['replayed_at'])}" if d["replayed_at"] else ", not replayed"),
        f"  created     {utc_time(d['created_at'])} UTC",
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
            + (f", last error {shorten(send['last_error'], 60)}" if send["last_error"] else "")
        )
        history = [
            (
                a["attempt"],
                utc_time(a["at"]),
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
        rows = [(utc_time(r["at"]), r["replayed_by"], r["reason"]) for r in story["replays"]]
        lines += ["", "replays:", format_table(("at (UTC)", "by", "why"), rows)]
    print("\n".join(lines))
    return 0


def operator_name() -> str:
    """Who is at the keyboard, for the audits: MAILBUS_OPERATOR, else the OS user."""
    try:
        return os.environ.get("MAILBUS_OPERATOR") or getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return f"uid {os.getuid()}"


def replay_candidates(
    store: DeadLetterStore, where: LetterFilter, limit: int | None = None
) -> tuple[list[Letter], Counter[str]]:
    """The letters a replay of ``where`` would put back (P0 first, oldest first, at most
    ``limit``), and what it would skip, by reason: the dry run's answer."""
    found, _ = store.find(replace(where, include_replayed=False), None)
    letters = replay_order(found)[:limit]
    verdicts = [(x, skip_reason(x)) for x in letters]
    skipped = Counter(reason for _, reason in verdicts if reason is not None)
    return [x for x, reason in verdicts if reason is None], skipped


def replay_paced(
    store: DeadLetterStore,
    letters: list[Letter],
    *,
    who: str,
    why: str,
    rate: float | None,
    stop: threading.Event,
    on_done: Callable[[int], None] = lambda done: None,
) -> tuple[int, Counter[str]]:
    """Replay ``letters`` in order, at most ``rate`` a second (None: unpaced), until
    ``stop``; each through the guarded :meth:`DeadLetterStore.replay`, so a letter is
    replayed once however many replays run at once. Returns (replayed, skipped by reason)."""
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
        on_done(done)
    if replayed:
        store.wake_relay()
    return replayed, skipped


def run_replay(
    settings: Settings,
    where: LetterFilter,
    *,
    why: str,
    rate: float | None = None,
    dry_run: bool = False,
    limit: int | None = None,
    stop: threading.Event | None = None,
    intake: IntakeRemap | None = None,
    as_json: bool = False,
) -> int:
    """Replay the matching dead letters not yet replayed, P0 first; print a summary, or with
    ``as_json`` one document (docs/reference/cli.md#json-documents). ``intake`` maps an
    intake dead letter's event again (without it, such a letter is skipped as having no
    send row)."""
    if not why.strip():
        raise ConfigError("--why", "must not be empty: it is recorded in the audit")
    stop = stop or threading.Event()
    with connect_store(settings.database_url, intake) as store:
        if dry_run:
            chosen, skipped = replay_candidates(store, where, limit)
            if as_json:
                would = [jsonable(asdict(x)) for x in chosen]
                document = {"dry_run": True, "would_replay": would, "would_skip": skipped}
                print_document(document)
                return 0
            if chosen:
                print(letters_table(chosen))
            print(replay_summary(len(chosen), skipped, dry_run=True))
            return 0
        found, _ = store.find(replace(where, include_replayed=False), None)
        letters = replay_order(found)[:limit]
        progress = TerminalProgress("replay", len(letters), sys.stderr)  # a terminal only
        replayed, skipped = replay_paced(
            store,
            letters,
            who=operator_name(),
            why=why,
            rate=rate,
            stop=stop,
            on_done=progress.update,
        )
        progress.finish()
    left = len(letters) - replayed - sum(skipped.values())
    if as_json:
        document = {"dry_run": False, "replayed": replayed, "skipped": skipped, "left": left}
        print_document(document)
        return 0
    print(replay_summary(replayed, skipped) + (f"; stopped, {left} left" if left else ""))
    return 0
