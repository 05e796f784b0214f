"""Campaigns in PostgreSQL: creation, the audience import in parts, state transitions.

``create_campaign`` commits the campaign row first (``importing``), then the audience in
parts of ``PART_SIZE`` lines: each part is one transaction, a COPY of its valid
recipients (ordinal = its line) and the line it reached (``imported_through``). So a
started campaign's pacer fans out the first parts while the rest is read, and an import
that stopped goes on from its last part (``import_audience``, `mailbus campaign import`):
no line is read into the table twice or skipped. One importer per campaign (an advisory
lock) keeps parts committing in line order, which the pacer's checkpoint relies on. The
last step removes lines whose user id an earlier line has, and ends ``importing``; until
then the pacer never ends the campaign ``finished``.

States: ``draft`` → (start) ``running`` ⇄ (pause/resume) ``paused``; the pacer ends a
running campaign ``finished`` when its audience is imported and handed out and its last
mail is final (accepted, failed, expired or suppressed): until then it can be paused and
cancelled. ``cancel`` ends any unfinished one ``cancelled`` (and its import).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol, runtime_checkable

import psycopg

from mailbus.campaigns.audience import Recipient, Rejected, open_audience
from mailbus.campaigns.errors import CampaignError, CampaignInputError
from mailbus.campaigns.pacing import Window
from mailbus.kernel.errors import InvalidSendError, StorageError
from mailbus.kernel.settings import Settings
from mailbus_client.send_request import SendRequest, validate_send_request
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "PART_SIZE",
    "CampaignSpec",
    "ImportReport",
    "RecipientSource",
    "Transition",
    "create_campaign",
    "import_audience",
    "transition",
]

# Audience lines per import transaction (MAILBUS_CAMPAIGN_IMPORT_PART): what the pacer
# waits for before it can start, and what a crash of the import makes it read again.
PART_SIZE = Settings.campaign_import_part


@dataclass(frozen=True)
class CampaignSpec:
    name: str
    template: str
    priority: str = "p2"
    rate_per_min: int = 600
    window: Window | None = None
    daily_cap: int | None = None
    warmup: tuple[int, ...] = ()
    audience: str = ""  # where the recipients came from, for `status`

    def check(self) -> None:
        if not self.name.strip():
            raise CampaignInputError("--name", "must not be empty")
        try:  # the same rules as any send: template name and priority
            validate_send_request(
                SendRequest(
                    "campaign-0-user-0", "check@example.com", self.template, {}, self.priority
                )
            )
        except InvalidSendError as exc:
            raise CampaignInputError(f"--{exc.field}", exc.problem) from None


@dataclass(frozen=True)
class ImportReport:
    campaign_id: int
    recipients: int  # valid, distinct recipients stored (all parts, earlier runs too)
    rejected: int  # lines skipped (invalid or a repeated user id), earlier runs too
    completed: bool = True  # False: the campaign was cancelled during the import


@runtime_checkable
class RecipientSource(Protocol):
    """An opened audience: a CSV (:class:`mailbus.campaigns.audience.Audience`) or a SQL query
    (:class:`mailbus.campaigns.sql_audience.SqlAudience`). ``records`` goes on after line
    ``after`` (and, for a SQL query, after the keyset key ``after_key``); ``last_key`` is
    the keyset key of the last record it yielded (None for a CSV)."""

    last_key: str | None

    def records(
        self, after: int = 0, after_key: str | None = None
    ) -> Iterator[Recipient | Rejected]: ...


def create_campaign(
    database_url: str,
    spec: CampaignSpec,
    source: IO[bytes] | RecipientSource,
    on_reject: Callable[[Rejected], None],
    *,
    on_created: Callable[[int], None] = lambda campaign_id: None,
    on_part: Callable[[int], None] = lambda lines: None,
    part_size: int = PART_SIZE,
) -> ImportReport:
    """Create a ``draft`` campaign and import its audience from ``source`` (a CSV
    stream, or an opened audience).

    ``on_created`` hears the campaign's id once its row is committed, before the import
    (a caller may start it then); ``on_reject`` hears every skipped line (invalid, or a
    user id already seen); ``on_part`` hears how many lines each committed part read.
    Raises :class:`CampaignInputError` for a bad header; nothing is then stored.

    Run again with the same name, template, priority and audience (``spec.audience``: the
    file or query; a create killed mid-import, say), it gives the same campaign and goes
    on with its import from its last committed part; with another template, priority or
    audience under that name it raises :class:`CampaignError` naming the campaign.
    """
    spec.check()
    # A CSV's header is checked before anything is written.
    audience = source if isinstance(source, RecipientSource) else open_audience(source)
    queries = load_queries("mailbus.campaigns", "queries.sql")
    try:
        with psycopg.connect(database_url) as conn:
            conn.execute(queries["name_lock"], {"name": spec.name})
            existing = None
            if spec.audience:  # an audience named (a file, a query): a create is repeatable
                existing = conn.execute(queries["campaign_named"], {"name": spec.name}).fetchone()
            if existing is None:
                row = conn.execute(queries["insert_campaign"], _spec_params(spec)).fetchone()
                assert row is not None
                campaign_id, importing = int(row[0]), True
            else:
                campaign_id, importing = _same_campaign(spec, *existing)
    except psycopg.Error as exc:
        raise StorageError(f"campaign creation failed: {exc}") from exc
    on_created(campaign_id)
    if not importing:  # created before, its audience complete (or its import cancelled)
        with psycopg.connect(database_url) as conn:
            return _report(conn, queries, campaign_id, completed=True)
    return import_audience(
        database_url, campaign_id, audience, on_reject, on_part=on_part, part_size=part_size
    )


def _same_campaign(
    spec: CampaignSpec, campaign_id: int, template: str, priority: str, audience: str,
    importing: bool,
) -> tuple[int, bool]:  # fmt: skip
    """A create again under a campaign's name (a create killed mid-import, run again): the
    same campaign when its template, priority and audience are the same, and whether its
    import is still open; otherwise :class:`CampaignError` naming it."""
    if (template, priority, audience) != (spec.template, spec.priority, spec.audience):
        raise CampaignError(
            f"--name: campaign {campaign_id} is already named {spec.name!r}, with"
            f" template {template}, priority {priority}, audience {audience}; the same name"
            " with the same template, priority and audience gives that campaign again"
        )
    return campaign_id, importing


def import_audience(
    database_url: str,
    campaign_id: int,
    audience: RecipientSource,
    on_reject: Callable[[Rejected], None],
    *,
    on_part: Callable[[int], None] = lambda lines: None,
    part_size: int = PART_SIZE,
) -> ImportReport:
    """Import ``audience`` into a campaign whose import is not complete, from where its
    last committed part ended (a new campaign: from the start). ``audience`` must be the
    same CSV or query as before. Raises :class:`CampaignError` if the campaign does not
    exist, has its whole audience, or another process imports it now."""
    q = load_queries("mailbus.campaigns", "queries.sql")
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            locked = conn.execute(q["import_lock"], {"id": campaign_id}).fetchone()
            if locked is None or not locked[0]:
                raise CampaignError(f"campaign {campaign_id} is being imported by another process")
            row = conn.execute(q["import_position"], {"id": campaign_id}).fetchone()
            if row is None:
                raise CampaignError(f"no campaign {campaign_id}")
            state, importing, through, key = row
            if not importing:
                raise CampaignError(
                    f"campaign {campaign_id} is {state}: its audience import is not open"
                    " (complete, or ended by a cancel)"
                )
            records = audience.records(after=through, after_key=key)
            first = True
            while True:
                part = _import_part(conn, q, campaign_id, records, part_size, audience, on_reject)
                if part is None:  # cancelled meanwhile: the rest is never read
                    return _report(conn, q, campaign_id, completed=False)
                on_part(part)
                if first:  # statistics for the pacer's first ticks
                    conn.execute(q["analyze_recipients"])
                    first = False
                if part < part_size:
                    break
            conn.execute(q["analyze_recipients"])
            _remove_repeats(conn, q, campaign_id, on_reject)
            return _report(conn, q, campaign_id, completed=True)
    except psycopg.Error as exc:
        raise StorageError(f"campaign import failed: {exc}") from exc


def _import_part(
    conn: psycopg.Connection[Any],
    q: dict[str, str],
    campaign_id: int,
    records: Iterator[Recipient | Rejected],
    part_size: int,
    audience: RecipientSource,
    on_reject: Callable[[Rejected], None],
) -> int | None:
    """Copy the next ``part_size`` lines in one transaction; how many lines it read, or
    None when the campaign no longer imports (then nothing of the part is kept)."""
    stored = rejected = read = 0
    through = None
    try:
        with conn.transaction():
            with conn.cursor() as cur, cur.copy(q["copy_recipients"]) as copy:
                for record in itertools.islice(records, part_size):
                    read += 1
                    through = record.line
                    if isinstance(record, Recipient):
                        copy.write_row(
                            (campaign_id, record.line, record.user_id, record.email,
                             _json_object(record.variables))
                        )  # fmt: skip
                        stored += 1
                    else:
                        rejected += 1
                        on_reject(record)
            if through is None:
                return 0  # the audience ended with the last part
            params = {
                "id": campaign_id,
                "stored": stored,
                "rejected": rejected,
                "through": through,
                "key": audience.last_key,
            }
            if conn.execute(q["record_part"], params).fetchone() is None:
                raise _Cancelled  # rolls the part back
    except _Cancelled:
        return None
    return read


_json_string = json.encoder.encode_basestring  # C: a str as a JSON string, non-ASCII kept


def _json_object(variables: dict[str, str]) -> str:
    """A recipient's variables (text values) as a JSON object, for COPY. Called once a line
    of a million-line import: ``json.dumps`` builds an encoder every call."""
    return (
        "{"
        + ",".join([_json_string(k) + ":" + _json_string(v) for k, v in variables.items()])
        + "}"
    )


class _Cancelled(Exception):
    """The campaign was cancelled while a part was read."""


def _remove_repeats(
    conn: psycopg.Connection[Any],
    q: dict[str, str],
    campaign_id: int,
    on_reject: Callable[[Rejected], None],
) -> None:
    """The import's last step: lines whose user id an earlier line has are removed and
    reported; those the pacer already handed out leave its counts. Ends ``importing``."""
    with conn.transaction():
        conn.execute(q["import_memory"])
        repeated = conn.execute(q["repeated_users"], {"id": campaign_id}).fetchall()
    with conn.transaction():
        locked = conn.execute(q["lock_importing"], {"id": campaign_id}).fetchone()
        if locked is None:
            return  # cancelled meanwhile
        checkpoint = int(locked[0])
        handed_out = [r for r in repeated if r[0] <= checkpoint]
        if repeated:
            ordinals = [line for line, _user, _first, _suppressed in repeated]
            conn.execute(q["delete_lines"], {"id": campaign_id, "ordinals": ordinals})
        conn.execute(
            q["finish_import"],
            {
                "id": campaign_id,
                "repeated": len(repeated),
                "handed_out": len(handed_out),
                "handed_out_suppressed": sum(1 for r in handed_out if r[3]),
            },
        )
    for line, user_id, first_line, _suppressed in repeated:
        on_reject(Rejected(line, f"user_id {user_id!r} repeats line {first_line}"))


def _report(
    conn: psycopg.Connection[Any], q: dict[str, str], campaign_id: int, *, completed: bool
) -> ImportReport:
    row = conn.execute(q["import_counts"], {"id": campaign_id}).fetchone()
    assert row is not None
    return ImportReport(campaign_id, int(row[0]), int(row[1]), completed=completed)


def _spec_params(spec: CampaignSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "template": spec.template,
        "priority": spec.priority,
        "rate_per_min": spec.rate_per_min,
        "window_start": None if spec.window is None else spec.window.start,
        "window_end": None if spec.window is None else spec.window.end,
        "daily_cap": spec.daily_cap,
        "warmup": list(spec.warmup),
        "audience": spec.audience,
    }


@dataclass(frozen=True)
class Transition:
    """A command's move: from which states, to which, and what it says otherwise."""

    verb: str
    done: str  # the verb's past participle, for messages
    to_state: str
    from_states: tuple[str, ...]
    already: str  # the state in which the command is a no-op


TRANSITIONS = {
    "start": Transition("start", "started", "running", ("draft",), "running"),
    "pause": Transition("pause", "paused", "paused", ("running",), "paused"),
    "resume": Transition("resume", "resumed", "running", ("paused",), "running"),
    "cancel": Transition(
        "cancel", "cancelled", "cancelled", ("draft", "running", "paused"), "cancelled"
    ),
}


def transition(
    database_url: str, campaign_id: int, verb: str, *, reason: str | None = None
) -> tuple[str, int]:
    """Apply ``verb``; return (a sentence saying what happened, the campaign's queued rows
    it held back (pause), released (resume) or expired (cancel)). ``reason``: why a pause
    (the reputation guard's), shown by ``status``; None for an operator's.

    Repeating a command is a no-op (pausing a paused campaign); a move the state does not
    allow raises :class:`CampaignError`.
    """
    move = TRANSITIONS[verb]
    queries = load_queries("mailbus.campaigns", "queries.sql")
    params = {
        "id": campaign_id,
        "to_state": move.to_state,
        "from_states": list(move.from_states),
        "reason": reason,
    }
    try:
        with psycopg.connect(database_url) as conn:
            moved = conn.execute(queries["transition"], params).fetchone()
            if moved is None:
                current = conn.execute(queries["campaign_state"], {"id": campaign_id}).fetchone()
                if current is None:
                    raise CampaignError(f"no campaign {campaign_id}")
                if current[0] == move.already:
                    return f"campaign {campaign_id} is already {current[0]}", 0
                allowed = " or ".join(move.from_states)
                raise CampaignError(
                    f"campaign {campaign_id} is {current[0]}: only a {allowed} campaign"
                    f" can be {move.done}"
                )
            said, rows = f"campaign {campaign_id} is {move.to_state}", 0
            if verb == "cancel":
                conn.execute(queries["lock_open_rows"], {"id": campaign_id})
            if verb in _ROW_FOLLOW_UP:
                rows = _count(conn, queries[_ROW_FOLLOW_UP[verb]], campaign_id)
            if verb == "cancel":
                in_doubt = _count(conn, queries["expire_in_doubt"], campaign_id)
                if in_doubt:
                    said += (
                        f"; {in_doubt} of its mails may be held by the provider:"
                        " each ends expired once a look-up says it was not accepted"
                    )
            conn.commit()
    except psycopg.Error as exc:
        raise StorageError(f"campaign {verb} failed: {exc}") from exc
    return said, rows


def _count(conn: psycopg.Connection[Any], query: str, campaign_id: int) -> int:
    return len(conn.execute(query, {"id": campaign_id}).fetchall())


# What a move does to the campaign's queued rows, in its transaction, whatever their
# attempts: pause holds them back, resume releases them; cancel locks the rows not yet
# final, then expires those the provider cannot hold (and the others by the look-up rule).
_ROW_FOLLOW_UP = {"pause": "hold_queued", "resume": "release_held", "cancel": "expire_unsent"}
