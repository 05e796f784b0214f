"""Campaign rows get what the enqueue helper gives other mail, against real PostgreSQL: the
template's policy expiry (MAILBUS_POLICY_FILE), and the queue cap (MAILBUS_QUEUE_CAP): a
campaign waits while the queue is full for its priority."""

from __future__ import annotations

import io
from datetime import timedelta

import psycopg
from test_campaigns import audience_csv, create

from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import CampaignSpec, create_campaign, transition
from mailbus_client.policies import MailPolicy, PolicyBook, QueueCap

BOOK = PolicyBook(
    (
        MailPolicy("flash", ("flash_sale*",), expire_after_s=3600),
        MailPolicy("default", ("*",)),
    )
)


def expiries(database_url: str, campaign_id: int) -> list[timedelta | None]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT expires_at - created_at FROM email_sends WHERE campaign_id = %s",
            (campaign_id,),
        ).fetchall()
    return [r[0] for r in rows]


def test_campaign_rows_expire_by_their_templates_policy(database_url: str) -> None:
    flash, plain = (
        create_campaign(
            database_url,
            CampaignSpec(name=template, template=template, rate_per_min=10**6),
            io.BytesIO(audience_csv(5)),
            lambda rejected: None,
        ).campaign_id
        for template in ("flash_sale_june", "newsletter")
    )
    pacer = Pacer(database_url, policies=BOOK)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for campaign_id in (flash, plain):
            transition(database_url, campaign_id, "start")
            result = pacer.tick(conn, campaign_id)
            assert result is not None and result.created == 5
    # now() is the transaction's start, as created_at: the expiry is exactly the policy's.
    assert expiries(database_url, flash) == [timedelta(hours=1)] * 5
    assert expiries(database_url, plain) == [None] * 5


def open_rows(database_url: str, n: int) -> None:
    with psycopg.connect(database_url) as conn:
        for i in range(n):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " VALUES (%s, 'someone@example.com', 'order_confirmation', 'p1')",
                (f"order-{i}",),
            )


def test_a_campaign_waits_while_the_queue_is_full_for_its_priority(database_url: str) -> None:
    cap = QueueCap(limit=10)  # p2 refused from 6 open rows (shares 0.6, 0.9, 1.0)
    open_rows(database_url, 2)
    campaign_id = create(database_url, audience_csv(20), rate_per_min=10**6)
    transition(database_url, campaign_id, "start")
    pacer = Pacer(database_url, queue_cap=cap)
    with psycopg.connect(database_url, autocommit=True) as conn:
        first = pacer.tick(conn, campaign_id)
        assert first is not None
        assert (first.created, first.limited_by, first.finished) == (4, "queue", False)
        second = pacer.tick(conn, campaign_id)
        assert second is not None and (second.created, second.limited_by) == (0, "queue")
        # The provider took every open row: the queue has room again.
        conn.execute("UPDATE email_sends SET status = 'accepted'")
        third = pacer.tick(conn, campaign_id)
        assert third is not None and (third.created, third.limited_by) == (6, "queue")
        conn.execute("UPDATE email_sends SET status = 'accepted'")
        for _ in range(3):
            pacer.tick(conn, campaign_id)
        count = conn.execute(
            "SELECT count(*) FROM email_sends WHERE campaign_id = %s", (campaign_id,)
        ).fetchone()
    assert count == (16,)  # 4 + 6 + 6; the last 4 wait for room


def test_without_a_cap_a_tick_hands_out_its_whole_grant(database_url: str) -> None:
    open_rows(database_url, 50)
    campaign_id = create(database_url, audience_csv(20), rate_per_min=10**6)
    transition(database_url, campaign_id, "start")
    with psycopg.connect(database_url, autocommit=True) as conn:
        result = Pacer(database_url, queue_cap=QueueCap()).tick(conn, campaign_id)
    assert result is not None and (result.created, result.fanned_out) == (20, True)
