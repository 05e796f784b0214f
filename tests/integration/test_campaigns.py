"""Campaign fan-out against real PostgreSQL: suppression before rows, the checkpoint in the
rows' transaction, two pacers at once, pause, resume, cancel."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from relay_runner import wait_until

from mailbus.campaigns.audience import Rejected
from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import CampaignSpec, create_campaign, transition
from mailbus.campaigns.views import collect_status
from mailbus.consumer.core.decide import SEND_HEADROOM_S
from mailbus.kernel.db_schema import DEFAULT_SCHEMA
from mailbus_client.sqlfiles import load_queries


def audience_csv(n: int, upper_every: int = 0) -> bytes:
    lines = ["user_id,email,first_name,city"]
    for i in range(1, n + 1):
        email = f"user{i}@example.com"
        if upper_every and i % upper_every == 0:
            email = email.upper()
        lines.append(f"u{i},{email},Name {i},City {i % 7}")
    return ("\n".join(lines) + "\n").encode()


def create(database_url: str, data: bytes, **spec: Any) -> int:
    rejected: list[Rejected] = []
    report = create_campaign(
        database_url,
        CampaignSpec(name="spring", template="newsletter", **spec),
        io.BytesIO(data),
        rejected.append,
    )
    assert rejected == []
    return report.campaign_id


def suppress(database_url: str, addresses: list[str]) -> None:
    with psycopg.connect(database_url) as conn:
        conn.cursor().executemany(
            "INSERT INTO email_suppressions (address) VALUES (%s)", [(a,) for a in addresses]
        )


def sends(database_url: str, campaign_id: int) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT dedupe_key, to_address, template, payload_json, priority, status"
            " FROM email_sends WHERE campaign_id = %s ORDER BY id",
            (campaign_id,),
        ).fetchall()


def count(database_url: str, campaign_id: int) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends WHERE campaign_id = %s", (campaign_id,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def drain(pacer: Pacer, database_url: str, campaign_id: int, max_ticks: int = 10_000) -> int:
    """Tick until every recipient is handed out (or the campaign no longer runs); returns
    the number of ticks."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for ticks in range(1, max_ticks):
            result = pacer.tick(conn, campaign_id)
            if result is None or result.fanned_out:
                return ticks
    raise AssertionError("the campaign never handed out its audience")


def settle_all(database_url: str, campaign_id: int, status: str = "accepted") -> None:
    """What the consumers would do: every row of the campaign final."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE email_sends SET status = %s WHERE campaign_id = %s", (status, campaign_id)
        )


def test_fan_out_skips_the_suppressed_whatever_their_case(database_url: str) -> None:
    n = 600
    campaign_id = create(database_url, audience_csv(n, upper_every=3), rate_per_min=10**8)
    # 60 suppressed: some entries stored upper case, some of their CSV addresses upper case.
    suppressed = {i for i in range(5, n + 1, 10)}
    suppress(
        database_url,
        [f"USER{i}@Example.COM" if i % 20 == 5 else f"user{i}@example.com" for i in suppressed],
    )
    transition(database_url, campaign_id, "start")
    drain(Pacer(database_url, max_batch=97), database_url, campaign_id)

    rows = sends(database_url, campaign_id)
    assert len(rows) == n - len(suppressed)
    expected_ids = [i for i in range(1, n + 1) if i not in suppressed]
    assert [r[0] for r in rows] == [f"campaign-{campaign_id}-user-u{i}" for i in expected_ids]
    for (_key, to, template, payload, priority, status), i in zip(rows, expected_ids, strict=True):
        assert to.lower() == f"user{i}@example.com"
        assert (template, priority, status) == ("newsletter", "p2", "pending")
        assert payload == {"user_id": f"u{i}", "first_name": f"Name {i}", "city": f"City {i % 7}"}
    with psycopg.connect(database_url) as conn:
        flagged = conn.execute(
            "SELECT user_id FROM campaign_recipients WHERE campaign_id = %s AND suppressed",
            (campaign_id,),
        ).fetchall()
    assert {r[0] for r in flagged} == {f"u{i}" for i in suppressed}
    status = collect_status(database_url, campaign_id)
    assert status["state"] == "running"  # handed out, its mail not yet final
    assert status["counts"]["suppressed"] == len(suppressed)
    assert status["counts"]["queued"] == status["counts"]["created"] == n - len(suppressed)
    assert status["counts"]["waiting"] == 0


def test_a_campaign_is_finished_when_its_last_mail_is_final(database_url: str) -> None:
    campaign_id = create(database_url, audience_csv(50), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    pacer = Pacer(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        handed = pacer.tick(conn, campaign_id)
        assert handed is not None and handed.fanned_out and not handed.finished
        assert handed.limited_by == "delivery"
        settle_all(database_url, campaign_id)
        with psycopg.connect(database_url) as other:  # one mail still retrying
            other.execute(
                "UPDATE email_sends SET status = 'pending', attempts = 1 WHERE dedupe_key = %s",
                (f"campaign-{campaign_id}-user-u7",),
            )
        waiting = pacer.tick(conn, campaign_id)
        assert waiting is not None and not waiting.finished
        assert collect_status(database_url, campaign_id)["state"] == "running"
        said, held = transition(database_url, campaign_id, "pause")  # still pausable
        assert said.endswith("is paused") and held == 1
        transition(database_url, campaign_id, "resume")
        settle_all(database_url, campaign_id)
        last = pacer.tick(conn, campaign_id)
        assert last is not None and last.finished
        assert pacer.tick(conn, campaign_id) is None
    assert collect_status(database_url, campaign_id)["state"] == "finished"


class CrashAfterFanOut(Pacer):
    """A pacer that dies inside its transaction, after writing rows, before the checkpoint."""

    def __init__(self, database_url: str, crash_on_tick: int, **kwargs: Any) -> None:
        super().__init__(database_url, **kwargs)
        self.ticks = 0
        self.crash_on_tick = crash_on_tick
        self._queries = dict(self._queries)
        record_tick = self._queries["record_tick"]
        self._queries["record_tick"] = "SELECT 1"  # replaced per tick below
        self._real_record_tick = record_tick

    def tick(self, conn: psycopg.Connection[Any], campaign_id: int) -> Any:
        self.ticks += 1
        crash = self.ticks == self.crash_on_tick
        self._queries["record_tick"] = "SELECT 1/0" if crash else self._real_record_tick
        return super().tick(conn, campaign_id)


def test_a_crash_between_rows_and_checkpoint_loses_and_duplicates_nothing(
    database_url: str,
) -> None:
    n = 1000
    campaign_id = create(database_url, audience_csv(n), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    crashing = CrashAfterFanOut(database_url, crash_on_tick=4, max_batch=150)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(3):
            crashing.tick(conn, campaign_id)
        assert count(database_url, campaign_id) == 450  # 150 a tick
        with pytest.raises(psycopg.errors.DivisionByZero):
            crashing.tick(conn, campaign_id)
    assert count(database_url, campaign_id) == 450  # the rows of the dead tick are undone
    drain(Pacer(database_url, max_batch=150), database_url, campaign_id)
    rows = sends(database_url, campaign_id)
    assert len(rows) == len({r[0] for r in rows}) == n
    status = collect_status(database_url, campaign_id)
    assert status["handed_out"] == n and status["state"] == "running"


def test_two_pacers_at_once_hand_each_recipient_out_once(database_url: str) -> None:
    n = 3000
    campaign_id = create(database_url, audience_csv(n), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    stop = threading.Event()
    pacers = [Pacer(database_url, max_batch=50, tick_s=0.01) for _ in range(2)]
    threads = [
        threading.Thread(target=p.run, args=(stop,), kwargs={"until_idle": True}) for p in pacers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    rows = sends(database_url, campaign_id)
    assert len(rows) == len({r[0] for r in rows}) == n
    status = collect_status(database_url, campaign_id)
    # Had both paced the same recipients, the conflicts would show as handed out twice.
    assert status["handed_out"] == n == status["counts"]["created"]


def test_pause_stops_new_rows_at_once_and_resume_finishes(database_url: str) -> None:
    n = 400
    campaign_id = create(database_url, audience_csv(n), rate_per_min=6000)  # 100 a second
    transition(database_url, campaign_id, "start")
    stop = threading.Event()
    pacer = Pacer(database_url, tick_s=0.05)
    thread = threading.Thread(target=pacer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: count(database_url, campaign_id) >= 50, 20, "some rows")
        said, _ = transition(database_url, campaign_id, "pause")
        assert said == f"campaign {campaign_id} is paused"
        at_pause = count(database_url, campaign_id)
        assert at_pause < n
        threading.Event().wait(2.0)  # twenty pacer ticks
        assert count(database_url, campaign_id) == at_pause
        status = collect_status(database_url, campaign_id)
        assert status["state"] == "paused"
        assert status["counts"]["waiting"] == n - at_pause
        assert transition(database_url, campaign_id, "pause")[0].endswith("already paused")
        transition(database_url, campaign_id, "resume")
        wait_until(
            lambda: collect_status(database_url, campaign_id)["handed_out"] == n,
            30,
            "the campaign to be handed out",
        )
        settle_all(database_url, campaign_id)
        wait_until(
            lambda: collect_status(database_url, campaign_id)["state"] == "finished",
            30,
            "the campaign to finish",
        )
    finally:
        stop.set()
        thread.join(timeout=10)
    rows = sends(database_url, campaign_id)
    assert len(rows) == len({r[0] for r in rows}) == n


def test_cancel_ends_in_a_visible_terminal_state(database_url: str) -> None:
    n = 500
    campaign_id = create(database_url, audience_csv(n), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    with psycopg.connect(database_url, autocommit=True) as conn:
        pacer = Pacer(database_url, max_batch=100)
        for _ in range(3):  # 100 a tick
            pacer.tick(conn, campaign_id)
        # u1 was answered 429 (a retry is pending): the provider does not hold it, it
        # expires. u2's call timed out (in doubt): it expires only by the look-up rule.
        conn.execute(
            "UPDATE email_sends SET attempts = 1, next_try_at = now() + interval '1 hour'"
            " WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u1",),
        )
        conn.execute(
            "UPDATE email_sends SET attempts = 1, in_doubt_since = now(),"
            " next_try_at = now() + interval '1 hour', published_at = now()"
            " WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u2",),
        )
        said, expired = transition(database_url, campaign_id, "cancel")
        assert said.startswith(f"campaign {campaign_id} is cancelled; 1 of its mails")
        assert expired == 299
        assert pacer.tick(conn, campaign_id) is None  # nothing more is handed out
        in_doubt = conn.execute(
            "SELECT status, expires_at <= now(), next_try_at, published_at FROM email_sends"
            " WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u2",),
        ).fetchone()
    # The consumer gets it at once, and expires it after a look-up (or finds it accepted).
    assert in_doubt == ("pending", True, None, None)
    assert count(database_url, campaign_id) == 300
    status = collect_status(database_url, campaign_id)
    assert status["state"] == "cancelled" and status["ended_at"] is not None
    assert status["counts"] == {
        "waiting": 0,
        "created": 300,
        "queued": 1,
        "sending": 0,
        "accepted": 0,
        "failed": 0,
        "expired": 299,
        "suppressed": 0,
        "cancelled": 200,
    }
    for verb in ("start", "resume", "pause"):
        with pytest.raises(CampaignError, match="is cancelled"):
            transition(database_url, campaign_id, verb)


def test_duplicate_user_ids_keep_the_first_line(database_url: str, tmp_path: Path) -> None:
    data = b"user_id,email\n1,a@example.com\n2,b@example.com\n1,c@example.com\n3,d@example.com\n"
    rejected: list[Rejected] = []
    report = create_campaign(
        database_url, CampaignSpec("dups", "newsletter"), io.BytesIO(data), rejected.append
    )
    assert (report.recipients, report.rejected) == (3, 1)
    assert rejected == [Rejected(4, "user_id '1' repeats line 2")]
    with psycopg.connect(database_url) as conn:
        kept = conn.execute(
            "SELECT ordinal, email FROM campaign_recipients WHERE campaign_id = %s"
            " ORDER BY ordinal",
            (report.campaign_id,),
        ).fetchall()
    assert kept == [(2, "a@example.com"), (3, "b@example.com"), (5, "d@example.com")]


def test_a_second_import_with_repeats_is_not_quadratic(database_url: str) -> None:
    """The repeated-user query once joined on stale statistics: minutes for 20,000 lines."""
    create(database_url, audience_csv(20_000))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ANALYZE campaign_recipients")
    data = audience_csv(20_000) + b"u7,again@example.com,Again,City\n"
    rejected: list[Rejected] = []
    started = time.monotonic()
    report = create_campaign(
        database_url, CampaignSpec("again", "newsletter"), io.BytesIO(data), rejected.append
    )
    assert time.monotonic() - started < 20
    assert (report.recipients, report.rejected) == (20_000, 1)
    assert rejected == [Rejected(20_002, "user_id 'u7' repeats line 8")]


def test_the_rate_holds_on_the_database_clock(database_url: str) -> None:
    campaign_id = create(database_url, audience_csv(2000), rate_per_min=1200)  # 20 a second
    transition(database_url, campaign_id, "start")
    stop = threading.Event()
    pacer = Pacer(database_url, tick_s=0.2)
    thread = threading.Thread(target=pacer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: count(database_url, campaign_id) >= 210, 40, "ten seconds of rows")
    finally:
        stop.set()
        thread.join(timeout=10)
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends, (SELECT min(created_at) AS t0 FROM email_sends) f"
            " WHERE created_at > t0 + interval '1 second' AND created_at <= t0 + interval '9 s'",
        ).fetchone()
    assert row is not None
    # 8 seconds at 20 a second, within 10%: long enough that one tick delayed by a loaded
    # machine at either end of the window (it failed once over 4 s) stays inside it.
    assert 144 <= row[0] <= 176


def forget_statistics(database_url: str, table: str) -> None:
    """Drop the planner's statistics of ``table``, as if ANALYZE had not seen the import.
    pg_statistic is a superuser's (the app role is not one): psql as the cluster's
    ``postgres`` user over the local socket of the stack's cluster, whose search_path knows
    no mailbus schema."""
    info = psycopg.conninfo.conninfo_to_dict(database_url)
    subprocess.run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            "psql",
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-p",
            str(info.get("port", 5432)),
            "-d",
            str(info["dbname"]),
            "-c",
            f"DELETE FROM pg_statistic WHERE starelid = '{DEFAULT_SCHEMA}.{table}'::regclass",
        ],
        check=True,
    )


def test_a_tick_walks_the_recipients_by_index_from_the_checkpoint(database_url: str) -> None:
    """Not a bitmap scan of the whole campaign and a sort (every tick read every recipient)."""
    campaign_id = create(database_url, audience_csv(5000))
    queries = load_queries("mailbus.campaigns", "queries.sql")
    forget_statistics(database_url, "campaign_recipients")
    with psycopg.connect(database_url) as conn:
        conn.execute(queries["tick_settings"])
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN " + queries["fan_out"],
                {
                    "id": campaign_id,
                    "after": 0,
                    "limit": 100,
                    "template": "t",
                    "priority": "p2",
                    "expire_after_s": None,
                    "unsub_base": "https://x.test",  # links on (campaigns/unsubscribe.py)
                    "unsub_inner": b"i" * 64,
                    "unsub_outer": b"o" * 64,
                },
            )
        )
        conn.rollback()
    assert "Index Scan using campaign_recipients_pkey on campaign_recipients r " in plan
    assert "Bitmap Heap Scan on campaign_recipients r " not in plan


def claimable(database_url: str, campaign_id: int) -> int:
    """How many of the campaign's pending rows the consumer's own claim would take now
    (run in a transaction that is rolled back)."""
    claim = load_queries("mailbus.consumer", "queries.sql")["claim_for_send"]
    with psycopg.connect(database_url) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM email_sends WHERE campaign_id = %s AND status = 'pending'",
                (campaign_id,),
            )
        ]
        claims = [
            {"id": i, "attempt": 0, "token": str(uuid.uuid4()), "provider": None} for i in ids
        ]
        taken = conn.execute(
            claim,
            {
                "claims": json.dumps(claims),
                "lease_s": 30,
                "headroom_s": SEND_HEADROOM_S,
                "max_age_s": None,
            },
        ).fetchall()
        conn.rollback()
    return len(taken)


def test_pause_holds_back_every_queued_row_and_the_claim_refuses_the_campaigns_rows(
    database_url: str,
) -> None:
    campaign_id = create(database_url, audience_csv(300), rate_per_min=10**8)
    transition(database_url, campaign_id, "start")
    retry_at = "now() + interval '1 hour'"
    with psycopg.connect(database_url, autocommit=True) as conn:
        Pacer(database_url, max_batch=100).tick(conn, campaign_id)
        conn.execute(  # u1 went out to the provider, got a 429, waits for its retry
            f"UPDATE email_sends SET attempts = 1, next_try_at = {retry_at} WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u1",),
        )
        conn.execute(  # u2's call is in flight
            "UPDATE email_sends SET status = 'sending' WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u2",),
        )
        conn.execute("UPDATE email_sends SET published_at = now()")  # on Kafka already
    assert claimable(database_url, campaign_id) == 98
    said, held = transition(database_url, campaign_id, "pause")
    assert said.endswith("is paused") and held == 99  # u1 too, whatever its attempts
    assert claimable(database_url, campaign_id) == 0  # a pointer on Kafka is skipped
    with psycopg.connect(database_url) as conn:
        # u2's call answers 429 after the pause: pending again, due, its pointer published
        conn.execute(
            "UPDATE email_sends SET status = 'pending', next_try_at = now(),"
            " published_at = now() WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u2",),
        )
        unpublished = conn.execute(
            "SELECT count(*) FILTER (WHERE published_at IS NULL) FROM email_sends"
            " WHERE campaign_id = %s",
            (campaign_id,),
        ).fetchone()
    assert unpublished == (99,)  # the relay publishes them again once released
    assert claimable(database_url, campaign_id) == 0  # the claim refuses a paused campaign
    said, released = transition(database_url, campaign_id, "resume")
    assert said.endswith("is running") and released == 100
    assert claimable(database_url, campaign_id) == 99  # u1 waits for its own retry time
    with psycopg.connect(database_url) as conn:
        kept = conn.execute(
            f"SELECT next_try_at BETWEEN {retry_at} - interval '1 minute' AND {retry_at},"
            " published_at IS NULL FROM email_sends WHERE dedupe_key = %s",
            (f"campaign-{campaign_id}-user-u1",),
        ).fetchone()
    assert kept == (True, True)  # a Retry-After still counts after the resume
    transition(database_url, campaign_id, "cancel")
    assert claimable(database_url, campaign_id) == 0
