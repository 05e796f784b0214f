"""The campaign view of `mailbus status` and the `mailbus_campaign_recipients` gauges of
/metrics: each campaign's recipients waiting, sent, failed, suppressed, unsubscribed."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from test_campaigns import audience_csv, create

from mailbus.app.status import collect_status, render_status
from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import transition
from mailbus.kernel import metrics
from mailbus.relay.outbox_metrics import OutboxCollector


@pytest.fixture
def campaign(database_url: str) -> Iterator[int]:
    """10 recipients; 6 handed out (user3 suppressed, so 5 rows): 2 accepted (user1 then
    unsubscribed through the campaign's link), 1 failed, 2 still pending."""
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO email_suppressions (address) VALUES ('User3@Example.com')")
    campaign_id = create(database_url, audience_csv(10), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    with psycopg.connect(database_url, autocommit=True) as conn:
        Pacer(database_url, max_batch=6).tick(conn, campaign_id)
        key = f"campaign-{campaign_id}-user-u%s"
        conn.execute(
            "UPDATE email_sends SET status = 'accepted' WHERE dedupe_key IN (%s, %s)",
            (key % 1, key % 2),
        )
        conn.execute("UPDATE email_sends SET status = 'failed' WHERE dedupe_key = %s", (key % 4,))
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source)"
            " VALUES ('user1@example.com', 'unsubscribed', %s)",
            (f"campaign:{campaign_id}",),
        )
    yield campaign_id


def test_status_shows_each_campaign_by_state(database_url: str, campaign: int) -> None:
    status = collect_status(database_url)
    assert status["campaigns"] == [
        {
            "id": campaign,
            "name": "spring",
            "state": "running",
            "paused_reason": None,
            "waiting": 6,  # 4 not handed out, 2 pending rows
            "sent": 2,
            "failed": 1,
            "suppressed": 1,
            "unsubscribed": 1,
        }
    ]
    text = render_status(status)
    header = next(i for i, line in enumerate(text) if line.lstrip().startswith("campaign "))
    assert text[header].split() == [
        "campaign", "state", "waiting", "sent", "failed", "suppressed", "unsubscribed", "name",
    ]  # fmt: skip
    assert text[header + 1].split() == [str(campaign), "running", "6", "2", "1", "1", "1", "spring"]


def test_metrics_gauges_per_campaign_and_state(database_url: str, campaign: int) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    metrics.start_metrics_server(port, OutboxCollector(database_url))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        metrics.stop_metrics_server()
    samples = {
        name: float(value)
        for name, value in (
            line.rsplit(" ", 1)
            for line in text.splitlines()
            if line.startswith("mailbus_campaign_recipients{")
        )
    }
    label = 'mailbus_campaign_recipients{campaign="%s",state="%s"}'
    assert samples == {
        label % (campaign, "waiting"): 6,
        label % (campaign, "sent"): 2,
        label % (campaign, "failed"): 1,
        label % (campaign, "suppressed"): 1,
        label % (campaign, "unsubscribed"): 1,
    }
