"""What the console reads that no other room does: recent rates for the overview, and
the keys a search names (an address or a provider message id). psycopg errors become
:class:`StorageError`."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from mailbus.campaigns.views import campaign_counts
from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = ["campaign_feedback", "campaign_progress", "find_keys", "rates"]

# A recipient whose mail will not change any more.
_SETTLED = ("accepted", "failed", "expired", "suppressed", "cancelled")


def _q() -> dict[str, str]:
    return load_queries("mailbus.console", "console.sql")


def rates(database_url: str) -> dict[str, list[tuple[str, int]]]:
    """Accepted calls per minute of the last hour, dead letters per hour of the last day."""
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            accepted = conn.execute(_q()["accepted_per_minute"]).fetchall()
            dead = conn.execute(_q()["dead_letters_per_hour"]).fetchall()
    except psycopg.Error as exc:
        raise StorageError(f"console figures not read: {exc}") from exc
    return {
        "accepted_per_minute": [(f"{m:%H:%M}", int(n)) for m, n in accepted],
        "dead_letters_per_hour": [(f"{h:%d %H}h", int(n)) for h, n in dead],
    }


def find_keys(database_url: str, text: str, limit: int = 50) -> list[dict[str, Any]]:
    """Sends whose dedupe key, provider message id or address (any case) is ``text``."""
    try:
        with psycopg.connect(database_url, connect_timeout=5, row_factory=dict_row) as conn:
            return conn.execute(_q()["find_keys"], {"q": text.strip(), "limit": limit}).fetchall()
    except psycopg.Error as exc:
        raise StorageError(f"search failed: {exc}") from exc


def campaign_progress(database_url: str, campaigns: list[dict[str, Any]]) -> None:
    """Add ``settled`` (recipients whose mail is final, or never to be made) and
    ``percent`` to each of :func:`mailbus.campaigns.views.collect_list`'s rows."""
    ids = [c["id"] for c in campaigns]
    sends: dict[int, dict[str, int]] = {i: {} for i in ids}
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            query = load_queries("mailbus.campaigns", "queries.sql")["overview_sends"]
            for campaign_id, status, n in conn.execute(query, {"ids": ids}):
                sends[campaign_id][status] = int(n)
    except psycopg.Error as exc:
        raise StorageError(f"campaign progress not read: {exc}") from exc
    for c in campaigns:
        counts = campaign_counts(
            c["state"], c["recipients"], c["processed"], c["suppressed"], sends[c["id"]]
        )
        c["settled"] = sum(counts[name] for name in _SETTLED)
        c["percent"] = 100 * c["settled"] // c["recipients"] if c["recipients"] else 0


def campaign_feedback(database_url: str, campaign_id: int) -> dict[str, int]:
    """Bounced, complained and unsubscribed recipients of one campaign."""
    try:
        with psycopg.connect(database_url, connect_timeout=5, row_factory=dict_row) as conn:
            row = conn.execute(_q()["campaign_feedback"], {"id": campaign_id}).fetchone()
    except psycopg.Error as exc:
        raise StorageError(f"campaign feedback not read: {exc}") from exc
    return {k: int(v) for k, v in (row or {}).items()}
