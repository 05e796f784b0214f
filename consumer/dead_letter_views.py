"""The pure side of `mailbus dlq`: option parsing, dead letters as values, tables.

Nothing here touches PostgreSQL: :mod:`mailbus.consumer.dead_letter_admin` reads and replays dead
letters and uses these values and renderings. ``skip_reason`` predicts, from a listed
letter, what the replay's guards will say, so a dry run tells the truth without writing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mailbus.kernel.errors import ConfigError

__all__ = [
    "DEFAULT_REPLAY_RATE",
    "PRIORITIES",
    "Letter",
    "LetterFilter",
    "format_table",
    "jsonable",
    "letters_table",
    "parse_choices",
    "parse_letter_id",
    "parse_since",
    "replay_order",
    "replay_summary",
    "shorten",
    "skip_reason",
    "utc_time",
]

PRIORITIES = ("p0", "p1", "p2")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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


DEFAULT_REPLAY_RATE = "300/min"  # `dlq replay` is paced unless told --rate 0 / --no-pace


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
    if letter.send_id is None and letter.reason.startswith("intake_"):
        return None  # the event is mapped again; whether the intake takes it, the replay says
    if letter.send_id is None:
        return "no send row (undecodable message)"
    if letter.send_status != "failed":
        return f"send {letter.send_status}, not failed"
    return None


def utc_time(moment: datetime | None) -> str:
    """A moment as ``YYYY-MM-DD HH:MM:SS`` in UTC; ``-`` for none."""
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: str | None, width: int) -> str:
    """The text on one line, cut to ``width`` characters with an ellipsis."""
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
            utc_time(x.created_at),
            x.priority,
            x.template,
            x.reason,
            x.status_code,
            x.attempts,
            shorten(x.dedupe_key, 40),
            shorten(x.error, 48),
        )
        for x in letters
    ]
    return format_table((*headers, "error"), rows)


def jsonable(value: Any) -> Any:
    """A row or story for ``--json``: times as ISO-8601 UTC, bytes as hex."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value


def replay_summary(replayed: int, skipped: Counter[str], dry_run: bool = False) -> str:
    """The last line of a replay: how many replayed, how many skipped and why."""
    why = "; ".join(f"{reason}: {n}" for reason, n in sorted(skipped.items()))
    verbs = ("dry run, nothing changed: would replay", "would skip") if dry_run else None
    replay_verb, skip_verb = verbs or ("replayed", "skipped")
    text = f"{replay_verb} {replayed}, {skip_verb} {sum(skipped.values())}"
    return text + (f" ({why})" if why else "")
