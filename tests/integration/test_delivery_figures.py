"""Delivery-event figures in `mailbus status`: counts and rates by window."""

from __future__ import annotations

import json
import os

import psycopg
from services import run_mailbus

from mailbus.app.status import collect_status, render_status
from mailbus.feedback.figures import delivery_figures, render_delivery_figures

_EVENT = """
INSERT INTO delivery_events (provider, event_id, type, bounce, message_id, occurred_at,
                             matched, received_at)
VALUES ('p', %s, %s, %s, 'm', now(), %s, now() - make_interval(mins => %s))
"""


def seed(database_url: str) -> None:
    """Last hour: 16 delivered, 2 hard, 2 soft, 1 complaint, 1 deferred (unmatched), 1
    dropped.
    Earlier that day: 20 delivered, 2 hard. Older than a day: 50 hard bounces."""
    rows: list[tuple[str, str | None, bool, int]] = (
        [("delivered", None, True, 10)] * 16
        + [("bounced", "hard", True, 20)] * 2
        + [("bounced", "soft", True, 30)] * 2
        + [("complained", None, True, 40)]
        + [("deferred", None, False, 50)]
        + [("dropped", None, True, 55)]
        + [("delivered", None, True, 300)] * 20
        + [("bounced", "hard", True, 600)] * 2
        + [("bounced", "hard", True, 2000)] * 50
    )
    with psycopg.connect(database_url) as conn:
        for number, (kind, bounce, matched, minutes) in enumerate(rows):
            conn.execute(_EVENT, (f"e{number}", kind, bounce, matched, minutes))


def test_figures_by_window(database_url: str) -> None:
    seed(database_url)
    with psycopg.connect(database_url) as conn:
        figures = delivery_figures(conn)
    assert figures == {
        "1h": {
            "delivered": 16,
            "deferred": 1,
            "hard_bounces": 2,
            "soft_bounces": 2,
            "complaints": 1,
            "unmatched": 1,
            "dropped": 1,
            "hard_bounce_rate": 0.1,
            "complaint_rate": 0.0625,
        },
        "24h": {
            "delivered": 36,
            "deferred": 1,
            "hard_bounces": 4,
            "soft_bounces": 2,
            "complaints": 1,
            "unmatched": 1,
            "dropped": 1,
            "hard_bounce_rate": round(4 / 42, 4),
            "complaint_rate": round(1 / 36, 4),
        },
    }
    lines = render_delivery_figures(figures)
    assert lines[1].split() == ["last", "1h", "16", "1", "2", "2", "10.0%", "1", "6.25%", "1"]
    assert "\n".join(lines) in "\n".join(render_status(collect_status(database_url)))


def test_an_empty_table_and_the_command(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        figures = delivery_figures(conn)
    assert figures is not None
    assert figures["24h"]["hard_bounce_rate"] is None
    assert figures["1h"]["delivered"] == 0
    seed(database_url)
    env = dict(os.environ, MAILBUS_DATABASE_URL=database_url)
    done = run_mailbus("status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["delivery_events"]["1h"]["hard_bounces"] == 2
    table = run_mailbus("status", env=env).stdout
    assert "delivery events" in table and "10.0%" in table
