"""Delivery-event figures for `mailbus status`: events of the last hour and day, the
hard-bounce rate (hard bounces ÷ delivered-or-bounced), the complaint rate
(complaints ÷ delivered) and the mail providers dropped after accepting it. One pass over
``delivery_events_received_at_idx``."""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = ["WINDOWS", "delivery_figures", "render_delivery_figures"]

WINDOWS = {"1h": "1 hour", "24h": "24 hours"}

_FIGURES = """
SELECT w.label,
       count(e.*) FILTER (WHERE e.type = 'delivered'),
       count(e.*) FILTER (WHERE e.type = 'deferred'),
       count(e.*) FILTER (WHERE e.type = 'bounced' AND e.bounce = 'hard'),
       count(e.*) FILTER (WHERE e.type = 'bounced' AND e.bounce = 'soft'),
       count(e.*) FILTER (WHERE e.type = 'complained'),
       count(e.*) FILTER (WHERE NOT e.matched),
       count(e.*) FILTER (WHERE e.type = 'dropped')
FROM (VALUES ('1h', interval '1 hour'), ('24h', interval '24 hours')) AS w (label, span)
LEFT JOIN delivery_events e ON e.received_at > now() - w.span
GROUP BY w.label
"""


def delivery_figures(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """Figures by window, or None before migration 0010 (no ``delivery_events``)."""
    exists = conn.execute("SELECT to_regclass('delivery_events') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return None
    figures = {}
    for label, delivered, deferred, hard, soft, complained, unmatched, dropped in conn.execute(
        _FIGURES
    ):
        outcomes = delivered + hard + soft
        figures[label] = {
            "delivered": delivered,
            "deferred": deferred,
            "hard_bounces": hard,
            "soft_bounces": soft,
            "complaints": complained,
            "unmatched": unmatched,
            "dropped": dropped,
            "hard_bounce_rate": round(hard / outcomes, 4) if outcomes else None,
            "complaint_rate": round(complained / delivered, 4) if delivered else None,
        }
    return {label: figures[label] for label in WINDOWS}


def render_delivery_figures(figures: dict[str, Any] | None) -> list[str]:
    if figures is None:
        return ["delivery events: not recorded (no delivery_events table)"]
    lines = [
        f"{'delivery events':<16}{'deliv.':>8}{'defer.':>8}{'hard':>8}{'soft':>8}"
        f"{'hard %':>8}{'compl.':>8}{'compl %':>9}{'dropped':>9}"
    ]
    for label, f in figures.items():
        lines.append(
            f"{'last ' + label:<16}{f['delivered']:>8}{f['deferred']:>8}{f['hard_bounces']:>8}"
            f"{f['soft_bounces']:>8}{_percent(f['hard_bounce_rate']):>8}"
            f"{f['complaints']:>8}{_percent(f['complaint_rate'], 2):>9}{f['dropped']:>9}"
        )
    return lines


def _percent(rate: float | None, digits: int = 1) -> str:
    return "-" if rate is None else f"{rate * 100:.{digits}f}%"
