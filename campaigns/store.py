"""Campaigns in PostgreSQL: creation with the audience import, and state transitions.

The import is one transaction: the campaign row, a COPY of every valid recipient (ordinal
= its CSV line), then the removal of repeated user ids. A crash or an error leaves no
campaign at all; a campaign that exists has its whole audience.

States: ``draft`` → (start) ``running`` ⇄ (pause/resume) ``paused``; the pacer ends a
running campaign ``finished`` when its audience is handed out; ``cancel`` ends any
unfinished one ``cancelled``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol, runtime_checkable

import psycopg

from campaigns.audience import Recipient, Rejected, open_audience
from campaigns.errors import CampaignError
from campaigns.pacing import Window
from mailbus.errors import InvalidSendError, StorageError
from mailbus_client.send_request import SendRequest, validate_send_request
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "CampaignSpec",
    "ImportReport",
    "RecipientSource",
    "Transition",
    "create_campaign",
    "transition",
]


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
            raise CampaignError("--name: must not be empty")
        try:  # the same rules as any send: template name and priority
            validate_send_request(
                SendRequest(
                    "campaign-0-user-0", "check@example.com", self.template, {}, self.priority
                )
            )
        except InvalidSendError as exc:
            raise CampaignError(f"--{exc.field}: {exc.problem}") from None


@dataclass(frozen=True)
class ImportReport:
    campaign_id: int
    recipients: int  # valid, distinct recipients stored
    rejected: int  # lines skipped (invalid or a repeated user id)


@runtime_checkable
class RecipientSource(Protocol):
    """An opened audience: a CSV (:class:`campaigns.audience.Audience`) or a SQL query
    (:class:`campaigns.sql_audience.SqlAudience`)."""

    def records(self) -> Iterator[Recipient | Rejected]: ...


def create_campaign(
    database_url: str,
    spec: CampaignSpec,
    source: IO[bytes] | RecipientSource,
    on_reject: Callable[[Rejected], None],
) -> ImportReport:
    """Create a ``draft`` campaign with the audience read from ``source`` (a CSV stream, or
    an opened audience).

    ``on_reject`` hears every skipped line (invalid, or a user id already seen) as it is
    found. Raises :class:`CampaignError` for a bad header; nothing is then stored.
    """
    spec.check()
    # A CSV's header is checked before anything is written.
    audience = source if isinstance(source, RecipientSource) else open_audience(source)
    queries = load_queries("campaigns", "queries.sql")
    try:
        with psycopg.connect(database_url) as conn:
            conn.execute(queries["import_memory"])
            row = conn.execute(queries["insert_campaign"], _spec_params(spec)).fetchone()
            assert row is not None
            campaign_id = int(row[0])
            stored = rejected = 0
            with conn.cursor() as cur, cur.copy(queries["copy_recipients"]) as copy:
                dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
                for record in audience.records():
                    if isinstance(record, Recipient):
                        copy.write_row(
                            (
                                campaign_id,
                                record.line,
                                record.user_id,
                                record.email,
                                dumps(record.variables),
                            )
                        )
                        stored += 1
                    else:
                        rejected += 1
                        on_reject(record)
            repeated = []
            for line, user_id, first_line in conn.execute(
                queries["repeated_users"], {"id": campaign_id}
            ):
                repeated.append(line)
                on_reject(Rejected(line, f"user_id {user_id!r} repeats line {first_line}"))
            if repeated:
                conn.execute(queries["delete_lines"], {"id": campaign_id, "ordinals": repeated})
            stored -= len(repeated)
            rejected += len(repeated)
            conn.execute(
                queries["record_import"],
                {"id": campaign_id, "recipients": stored, "invalid": rejected},
            )
            conn.execute(queries["analyze_recipients"])
            conn.commit()
    except psycopg.Error as exc:
        raise StorageError(f"campaign import failed: {exc}") from exc
    return ImportReport(campaign_id, stored, rejected)


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


def transition(database_url: str, campaign_id: int, verb: str) -> tuple[str, int]:
    """Apply ``verb``; return (a sentence saying what happened, the campaign's untried
    rows it held back (pause), released (resume) or expired (cancel)).

    Repeating a command is a no-op (pausing a paused campaign); a move the state does not
    allow raises :class:`CampaignError`.
    """
    move = TRANSITIONS[verb]
    queries = load_queries("campaigns", "queries.sql")
    params = {"id": campaign_id, "to_state": move.to_state, "from_states": list(move.from_states)}
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
            rows = 0
            follow_up = _ROW_FOLLOW_UP.get(verb)
            if follow_up is not None:
                rows = len(conn.execute(queries[follow_up], {"id": campaign_id}).fetchall())
            conn.commit()
    except psycopg.Error as exc:
        raise StorageError(f"campaign {verb} failed: {exc}") from exc
    return f"campaign {campaign_id} is {move.to_state}", rows


# What a move does to the campaign's rows not yet offered to a provider, in its transaction:
# pause holds them back, resume releases them, cancel expires them.
_ROW_FOLLOW_UP = {"pause": "hold_untried", "resume": "release_held", "cancel": "expire_untried"}
