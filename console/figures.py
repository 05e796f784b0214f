"""What the console reads that no other room does: recent rates for the overview, and
the keys a search names (an address or a provider message id). Each reads on the
connection it is given (the console's pool: :func:`mailbus.console.web.run_on`); psycopg
errors become :class:`StorageError`."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = ["campaign_feedback", "campaign_progress", "find_keys", "rates", "settled"]


def _q() -> dict[str, str]:
    return load_queries("mailbus.console", "console.sql")


def rates(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[str, int]]]:
    """Accepted calls per minute of the last hour, dead letters per hour of the last day
    (read on the overview's connection: :func:`mailbus.app.overview.collect_overview`)."""
    accepted = conn.execute(_q()["accepted_per_minute"]).fetchall()
    dead = conn.execute(_q()["dead_letters_per_hour"]).fetchall()
    return {
        "accepted_per_minute": [(f"{m:%H:%M}", int(n)) for m, n in accepted],
        "dead_letters_per_hour": [(f"{h:%d %H}h", int(n)) for h, n in dead],
    }


def find_keys(conn: psycopg.Connection[Any], text: str, limit: int = 50) -> list[dict[str, Any]]:
    """Sends whose dedupe key, provider message id or address (any case) is ``text``."""
    try:
        with conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(_q()["find_keys"], {"q": text.strip(), "limit": limit}).fetchall()
    except psycopg.Error as exc:
        raise StorageError(f"search failed: {exc}") from exc


def campaign_progress(conn: psycopg.Connection[Any], campaigns: list[dict[str, Any]]) -> None:
    """Add ``settled`` (recipients whose mail is final, or never to be made) and
    ``percent`` to each of :func:`mailbus.campaigns.views.collect_list`'s rows. Only the
    campaigns' open mail is counted (a few rows each, by email_sends_campaign_idx): a
    campaign of a million settled mails costs no more than one of ten."""
    ids = [c["id"] for c in campaigns]
    open_sends: dict[int, int] = {}
    try:
        for campaign_id, n in conn.execute(_q()["open_sends"], {"ids": ids}):
            open_sends[campaign_id] = int(n)
    except psycopg.Error as exc:
        raise StorageError(f"campaign progress not read: {exc}") from exc
    for c in campaigns:
        c["settled"] = settled(
            c["state"], c["recipients"], c["processed"], open_sends.get(c["id"], 0)
        )
        c["percent"] = 100 * c["settled"] // c["recipients"] if c["recipients"] else 0


def settled(state: str, recipients: int, processed: int, open_sends: int) -> int:
    """Recipients whose mail is final or will never be made (pure): every recipient but
    those not handed out yet (a cancelled campaign's never will be) and the open mails.
    The sum of :func:`mailbus.campaigns.views.campaign_counts`' final states, without
    counting the final ones."""
    waiting = 0 if state == "cancelled" else max(0, recipients - processed)
    return max(0, recipients - waiting - open_sends)


def campaign_feedback(conn: psycopg.Connection[Any], campaign_id: int) -> dict[str, int]:
    """Bounced, complained and unsubscribed recipients of one campaign."""
    try:
        with conn.cursor(row_factory=dict_row) as cursor:
            row = cursor.execute(_q()["campaign_feedback"], {"id": campaign_id}).fetchone()
    except psycopg.Error as exc:
        raise StorageError(f"campaign feedback not read: {exc}") from exc
    return {k: int(v) for k, v in (row or {}).items()}
