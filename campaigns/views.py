"""`campaign status` and `campaign list`: figures as values (for ``--json``) and as text."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from mailbus.campaigns.errors import CampaignError
from mailbus.kernel.errors import StorageError
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "COUNTS",
    "OVERVIEW",
    "campaign_counts",
    "collect_list",
    "collect_overview",
    "collect_status",
    "overview_counts",
    "render_overview",
    "render_status",
]

# The states a recipient is shown in, in the order a campaign moves them.
COUNTS = (
    "waiting",  # not yet handed out by the pacer
    "queued",  # an email_sends row, pending
    "sending",  # being sent, or its outcome not yet known
    "accepted",
    "failed",
    "expired",
    "suppressed",  # filtered before a row was made, or suppressed at send time
    "cancelled",  # never handed out: the campaign was cancelled
)


def campaign_counts(
    state: str, recipients: int, processed: int, suppressed_before: int, sends: dict[str, int]
) -> dict[str, int]:
    """Every recipient in one state (pure): ``sends`` is email_sends rows by status."""
    left = max(0, recipients - processed)
    return {
        "waiting": 0 if state == "cancelled" else left,
        "created": sum(sends.values()),
        "queued": sends.get("pending", 0),
        "sending": sends.get("sending", 0) + sends.get("unknown", 0),
        "accepted": sends.get("accepted", 0),
        "failed": sends.get("failed", 0),
        "expired": sends.get("expired", 0),
        "suppressed": suppressed_before + sends.get("suppressed", 0),
        "cancelled": left if state == "cancelled" else 0,
    }


# The campaign view of `mailbus status` and of /metrics (mailbus_campaign_recipients).
OVERVIEW = (
    "waiting",  # not yet handed out, queued or being sent
    "sent",  # accepted by the provider
    "failed",  # failed, or expired (e.g. cancelled before it was offered)
    "suppressed",  # filtered before a row was made, or suppressed at send time
    "unsubscribed",  # addresses unsubscribed through this campaign's links (were sent)
)


def overview_counts(counts: dict[str, int], unsubscribed: int) -> dict[str, int]:
    """:func:`campaign_counts` folded into the states of ``OVERVIEW`` (pure)."""
    return {
        "waiting": counts["waiting"] + counts["queued"] + counts["sending"],
        "sent": counts["accepted"],
        "failed": counts["failed"] + counts["expired"],
        "suppressed": counts["suppressed"],
        "unsubscribed": unsubscribed,
    }


def collect_overview(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Campaigns not ended, or ended within a day: id, name, state and ``OVERVIEW``
    counts. Raises psycopg errors (the caller knows its context)."""
    queries = load_queries("mailbus.campaigns", "queries.sql")
    campaigns = conn.execute(queries["overview_campaigns"]).fetchall()
    sends: dict[int, dict[str, int]] = {}
    ids = [row[0] for row in campaigns]
    for campaign_id, status, n in conn.execute(queries["overview_sends"], {"ids": ids}):
        sends.setdefault(campaign_id, {})[status] = int(n)
    return [
        {
            "id": campaign_id,
            "name": name,
            "state": state,
            "paused_reason": paused_reason,  # the reputation guard's, None otherwise
            **overview_counts(
                campaign_counts(
                    state, recipients, processed, suppressed, sends.get(campaign_id, {})
                ),
                int(unsubscribed),
            ),
        }
        for (
            campaign_id, name, state, recipients, processed, suppressed, unsubscribed,
            paused_reason,
        ) in campaigns
    ]  # fmt: skip


def render_overview(campaigns: list[dict[str, Any]]) -> list[str]:
    if not campaigns:
        return ["campaigns: none running, paused or ended in the last day"]
    lines = [f"{'campaign':>8}  {'state':<10}" + "".join(f"{s:>13}" for s in OVERVIEW) + "  name"]
    for c in campaigns:
        lines.append(
            f"{c['id']:>8}  {c['state']:<10}"
            + "".join(f"{c[s]:>13}" for s in OVERVIEW)
            + f"  {c['name']}"
        )
        if c.get("paused_reason"):
            lines.append(f"{'':>8}  paused: {c['paused_reason']}")
    return lines


def collect_status(database_url: str, campaign_id: int) -> dict[str, Any]:
    queries = load_queries("mailbus.campaigns", "queries.sql")
    try:
        with psycopg.connect(database_url) as conn:
            cursor = conn.execute(queries["campaign_row"], {"id": campaign_id})
            row = cursor.fetchone()
            if row is None:
                raise CampaignError(f"no campaign {campaign_id}")
            names = [column.name for column in cursor.description or ()]
            campaign = dict(zip(names, row, strict=True))
            sends = {
                status: int(n)
                for status, n in conn.execute(queries["sends_by_status"], {"id": campaign_id})
            }
    except psycopg.Error as exc:
        raise StorageError(f"campaign status failed: {exc}") from exc
    window = None
    if campaign["window_start"] is not None:
        window = f"{campaign['window_start']:%H:%M}-{campaign['window_end']:%H:%M}"
    return {
        "id": campaign["id"],
        "name": campaign["name"],
        "template": campaign["template"],
        "priority": campaign["priority"],
        "state": campaign["state"],
        "paused_reason": campaign["paused_reason"],  # the reputation guard's; None otherwise
        "rate_per_min": campaign["rate_per_min"],
        "window_utc": window,
        "daily_cap": campaign["daily_cap"],
        "warmup": list(campaign["warmup"] or []),
        "audience": campaign["audience"],
        "recipients": campaign["recipients"],
        "invalid_lines": campaign["invalid_lines"],
        # The audience import is not complete: recipients are those imported so far.
        "importing": campaign["importing"],
        "imported_through": campaign["imported_through"],
        "handed_out": campaign["processed"],
        "counts": campaign_counts(
            campaign["state"],
            campaign["recipients"],
            campaign["processed"],
            campaign["suppressed"],
            sends,
        ),
        "sends_by_status": sends,
        "created_at": _iso(campaign["created_at"]),
        "started_at": _iso(campaign["started_at"]),
        "ended_at": _iso(campaign["ended_at"]),
    }


def render_status(status: dict[str, Any]) -> list[str]:
    pace = f"{status['rate_per_min']}/min"
    if status["window_utc"]:
        pace += f", window {status['window_utc']} UTC"
    if status["daily_cap"]:
        pace += f", daily cap {status['daily_cap']}"
    if status["warmup"]:
        pace += f", warm-up {','.join(str(n) for n in status['warmup'])}"
    lines = [
        f"campaign {status['id']} {status['name']!r}: {status['state']}"
        + (f" ({status['paused_reason']})" if status.get("paused_reason") else ""),
        f"template {status['template']}, {status['priority']}, {pace}",
        f"recipients {status['recipients']} (lines skipped at import: {status['invalid_lines']}),"
        f" handed out {status['handed_out']}, rows created {status['counts']['created']}",
    ]
    if status["importing"]:
        lines.append(
            f"audience import not complete: read through line {status['imported_through']}"
            f" (if no import runs: mailbus campaign import {status['id']} --audience ...)"
        )
    counts = status["counts"]
    lines.append("".join(f"{name:>11}" for name in COUNTS))
    lines.append("".join(f"{counts[name]:>11}" for name in COUNTS))
    return lines


def collect_list(database_url: str, limit: int) -> list[dict[str, Any]]:
    queries = load_queries("mailbus.campaigns", "queries.sql")
    try:
        with psycopg.connect(database_url) as conn:
            cursor = conn.execute(queries["list_campaigns"], {"limit": limit})
            names = [column.name for column in cursor.description or ()]
            rows = [dict(zip(names, row, strict=True)) for row in cursor]
    except psycopg.Error as exc:
        raise StorageError(f"campaign list failed: {exc}") from exc
    for row in rows:
        row["created_at"] = _iso(row["created_at"])
    return rows


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
