"""The reputation guard against the real PostgreSQL: a campaign whose accepted mail
hard-bounces over the threshold is paused with its reason, as `campaign pause` pauses; one
under it, or whose bounces are older than the window, goes on; `status --json` shows the
rates."""

from __future__ import annotations

import io
import json
import threading
import uuid
from dataclasses import replace

import psycopg
from relay_runner import wait_until
from services import run_mailbus

from mailbus.campaigns.guard import ReputationGuard
from mailbus.campaigns.pacer import start_pacer_thread
from mailbus.campaigns.reputation import Thresholds
from mailbus.campaigns.store import CampaignSpec, create_campaign, transition
from mailbus.campaigns.views import collect_status
from mailbus.kernel.settings import Settings

GUARD = {"thresholds": Thresholds(0.05, 0.001, 100), "window_s": 86_400.0, "interval_s": 60.0}


def started_campaign(database_url: str, name: str) -> int:
    report = create_campaign(
        database_url,
        CampaignSpec(name=name, template="newsletter"),
        io.BytesIO(b"user_id,email\nu1,u1@example.com\n"),
        lambda rejected: None,
    )
    transition(database_url, report.campaign_id, "start")
    return report.campaign_id


def accepted(
    database_url: str, campaign_id: int, n: int, hard_bounced: int, *, age: str = "0 seconds"
) -> None:
    """``n`` mails of the campaign accepted ``age`` ago (provider NULL: MAILBUS_PROVIDER's),
    the first ``hard_bounced`` of them with a hard-bounce event, one more with a soft one."""
    with psycopg.connect(database_url) as conn:
        ids = [uuid.uuid4().hex for _ in range(n)]
        conn.cursor().executemany(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, campaign_id,"
            " status, message_id, accepted_at, attempts)"
            " VALUES (%s, %s, 'newsletter', 'p2', %s, 'accepted', %s,"
            " now() - %s::interval, 1)",
            [(f"k-{m}", f"{m}@example.com", campaign_id, m, age) for m in ids],
        )
        events = [(m, "hard") for m in ids[:hard_bounced]] + [(ids[-1], "soft")]
        conn.cursor().executemany(
            "INSERT INTO delivery_events (provider, event_id, type, bounce, message_id,"
            " occurred_at, matched) VALUES ('http', %s, 'bounced', %s, %s, now(), true)",
            [(uuid.uuid4().hex, kind, m) for m, kind in events],
        )


def queued(database_url: str, campaign_id: int) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority, campaign_id)"
            " VALUES (%s, 'q@example.com', 'newsletter', 'p2', %s) RETURNING id",
            (uuid.uuid4().hex, campaign_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_campaign_over_the_bounce_threshold_is_paused_with_its_reason(
    database_url: str,
) -> None:
    over = started_campaign(database_url, "over")
    under = started_campaign(database_url, "under")
    old = started_campaign(database_url, "bounced before the window")
    accepted(database_url, over, 100, 6)  # 6%
    accepted(database_url, under, 100, 4)  # 4% (and a soft bounce, never counted)
    with psycopg.connect(database_url) as conn:  # started two days ago: only the window counts
        conn.execute(
            "UPDATE campaigns SET guarded_since = now() - interval '2 days' WHERE id = %s", (old,)
        )
    accepted(database_url, old, 100, 50, age="24 hours 1 second")  # just outside the window
    accepted(database_url, old, 100, 1)
    waiting = queued(database_url, over)
    guard = ReputationGuard(database_url, primary="http", **GUARD)

    with psycopg.connect(database_url, autocommit=True) as conn:
        pauses = guard.check(conn)
    assert pauses is not None and [p.campaign_id for p in pauses] == [over]
    shown = collect_status(database_url, over)
    assert shown["state"] == "paused"
    assert shown["paused_reason"] == (
        "reputation: bounce rate 6.00% (6 of 100 accepted through http) reached 5.00%"
    )
    assert collect_status(database_url, under)["state"] == "running"
    assert collect_status(database_url, old)["state"] == "running"
    with psycopg.connect(database_url) as conn:  # held back as `campaign pause` holds it
        row = conn.execute(
            "SELECT status, next_try_at > now() + interval '1 year' FROM email_sends WHERE id = %s",
            (waiting,),
        ).fetchone()
    assert row == ("pending", True)

    # Resumed, it is judged by what it sends from then on: not paused again at once.
    said, _released = transition(database_url, over, "resume")
    assert said.endswith("is running")
    assert collect_status(database_url, over)["paused_reason"] is None
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert guard.check(conn) == []
    assert collect_status(database_url, over)["state"] == "running"


def test_a_round_held_by_another_process_is_skipped(database_url: str) -> None:
    over = started_campaign(database_url, "over")
    accepted(database_url, over, 100, 10)
    guard = ReputationGuard(database_url, primary="http", **GUARD)
    with psycopg.connect(database_url) as other:
        other.execute("SELECT pg_advisory_xact_lock(hashtext('mailbus.campaigns.reputation'))")
        with psycopg.connect(database_url, autocommit=True) as conn:
            assert guard.check(conn) is None
    assert collect_status(database_url, over)["state"] == "running"


def test_status_json_shows_the_rates_and_the_pause(database_url: str) -> None:
    over = started_campaign(database_url, "over")
    accepted(database_url, over, 100, 6)
    guard = ReputationGuard(database_url, primary="http", **GUARD)
    with psycopg.connect(database_url, autocommit=True) as conn:
        guard.check(conn)
    env = {"MAILBUS_DATABASE_URL": database_url, "MAILBUS_REPUTATION_MIN_SENDS": "100"}
    done = run_mailbus("status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    rep = json.loads(done.stdout)["reputation"]
    assert rep["thresholds"] == {"bounce_rate": 0.05, "complaint_rate": 0.001, "min_sends": 100}
    assert rep["providers"] == [
        {"provider": "http", "sent": 100, "bounced": 6, "complained": 0,
         "bounce_rate": 0.06, "complaint_rate": 0.0}
    ]  # fmt: skip
    assert rep["campaigns"] == [
        {"campaign": over, "state": "paused", "provider": "http", "sent": 100, "bounced": 6,
         "complained": 0, "bounce_rate": 0.06, "complaint_rate": 0.0}
    ]  # fmt: skip
    [shown] = [c for c in json.loads(done.stdout)["campaigns"] if c["id"] == over]
    assert shown["paused_reason"].startswith("reputation: bounce rate 6.00%")
    text = run_mailbus("status", env=env)
    assert "campaign " + str(over) + " via http" in text.stdout
    assert "paused: reputation: bounce rate 6.00%" in text.stdout


def test_the_relays_pacer_runs_the_guard(settings: Settings) -> None:
    over = started_campaign(settings.database_url, "over")
    accepted(settings.database_url, over, 100, 6)
    stop = threading.Event()
    pacer = start_pacer_thread(replace(settings, reputation_min_sends=100), stop)
    try:
        wait_until(
            lambda: collect_status(settings.database_url, over)["state"] == "paused",
            20,
            "the relay's pacer to pause the campaign",
        )
    finally:
        stop.set()
        pacer.join(10)
    assert collect_status(settings.database_url, over)["paused_reason"].startswith("reputation:")
