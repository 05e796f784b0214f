"""The daily quota across campaigns (MAILBUS_CAMPAIGN_DAILY_QUOTA): two pacer processes'
rounds together never exceed it, and running campaigns share it max-min fairly."""

from __future__ import annotations

import threading

import psycopg
from test_campaigns import audience_csv, create

from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import transition
from mailbus.campaigns.views import collect_status


def test_two_pacers_share_the_daily_quota_fairly_and_never_exceed_it(database_url: str) -> None:
    quota = 1000
    ids = [create(database_url, audience_csv(2000), rate_per_min=10**8) for _ in range(2)]
    for campaign_id in ids:
        transition(database_url, campaign_id, "start")
    pacers = [Pacer(database_url, max_batch=37, daily_quota=quota) for _ in range(2)]
    start = threading.Barrier(len(pacers))

    def rounds(pacer: Pacer) -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            start.wait()
            for _ in range(60):  # far more rounds than the quota needs
                pacer.tick_all(conn)

    threads = [threading.Thread(target=rounds, args=(p,)) for p in pacers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    handed = [collect_status(database_url, i)["handed_out"] for i in ids]
    assert handed == [quota // 2, quota // 2]  # the quota, split evenly, never more
    assert all(collect_status(database_url, i)["state"] == "running" for i in ids)


def test_a_slow_campaign_leaves_its_unused_part_to_the_others(database_url: str) -> None:
    slow = create(database_url, audience_csv(2000), rate_per_min=600)  # about 10 a tick
    fast = create(database_url, audience_csv(2000), rate_per_min=10**8)
    for campaign_id in (slow, fast):
        transition(database_url, campaign_id, "start")
    pacer = Pacer(database_url, max_batch=500, daily_quota=400)
    with psycopg.connect(database_url, autocommit=True) as conn:
        results = {r.campaign_id: r for r in pacer.tick_all(conn)}
    assert results[slow].handed_out <= 20  # its own pace, not half the quota
    assert results[fast].handed_out == 400 - results[slow].handed_out
    assert results[fast].limited_by == "quota"
