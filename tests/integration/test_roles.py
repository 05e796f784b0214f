"""`mailbus migrate --roles`: each group role can do its job and is refused the rest, on
the real PostgreSQL, as a login role that is a member of the group."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege
from services import run_mailbus
from transport_security import login_as

from mailbus.app.migrate import ROLES, apply_roles
from mailbus.campaigns.guard import ReputationGuard
from mailbus.campaigns.reputation import Thresholds
from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.store import EventStore, Recorded
from mailbus_client.enqueue import QueueCap, SendRequest, enqueue


@pytest.fixture
def roles_db(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('seed', 'a@x.org', 't')"
        )
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source) VALUES ('b@x.org', 'r', 's')"
        )
    yield database_url


def refused(url: str, statement: str) -> bool:
    """True when PostgreSQL refuses ``statement`` for lack of privilege (nothing changes)."""
    with psycopg.connect(url) as conn:
        try:
            conn.execute(statement)
        except InsufficientPrivilege:
            return True
        conn.rollback()
        return False


def test_migrate_roles_is_idempotent_and_creates_nologin_groups(database_url: str) -> None:
    for _ in range(2):
        done = run_mailbus(
            "migrate", "--roles", "--skip-topics", env={"MAILBUS_DATABASE_URL": database_url}
        )
        assert done.returncode == 0, done.stderr
        assert "mailbus_enqueuer" in done.stdout
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname = ANY(%s)",
            (list(ROLES),),
        ).fetchall()
    assert sorted(rows) == sorted((role, False, False) for role in ROLES)


def test_the_stacks_app_role_is_no_superuser(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        [(superuser, createdb, createrole)] = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchall()
    assert (superuser, createdb, createrole) == (False, True, True)


def test_enqueuer_enqueues_and_nothing_else(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_enqueuer") as url:
        with psycopg.connect(url) as conn:
            first = enqueue(conn, SendRequest("k-1", "c@x.org", "welcome"))
            again = enqueue(conn, SendRequest("k-1", "c@x.org", "welcome"))
            capped = enqueue(conn, SendRequest("k-2", "d@x.org", "welcome"), cap=QueueCap(100))
        assert first.created and not again.created and again.send_id == first.send_id
        assert capped.created
        assert refused(url, "UPDATE email_sends SET status = 'cancelled'")
        assert refused(url, "DELETE FROM email_sends")
        assert refused(url, "SELECT to_address FROM email_sends")
        assert refused(url, "SELECT payload_json FROM email_sends")
        assert refused(url, "SELECT * FROM email_suppressions")
        assert refused(url, "SELECT * FROM email_attempts")
        assert refused(
            url,
            "INSERT INTO email_sends (dedupe_key, to_address, template, status)"
            " VALUES ('k-3', 'e@x.org', 't', 'accepted')",
        )


def test_relay_cannot_delete_or_touch_what_is_not_its_own(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_relay") as url:
        with psycopg.connect(url) as conn:  # what it does: claim and mark published
            conn.execute("UPDATE email_sends SET published_at = now() WHERE dedupe_key = 'seed'")
            # the event lane: publish outcome events, prune old ones
            conn.execute("UPDATE email_send_events SET published_at = now()")
            conn.execute(
                "DELETE FROM email_send_events WHERE published_at < now() - interval '1 day'"
            )
        assert refused(url, "DELETE FROM email_sends")
        assert refused(url, "INSERT INTO email_send_events (send_id) VALUES (1)")
        assert refused(url, "DELETE FROM email_dead_letters")
        assert refused(url, "INSERT INTO email_suppressions (address) VALUES ('z@x.org')")
        assert refused(url, "SELECT * FROM email_attempts")
        assert refused(url, "TRUNCATE email_sends")


def test_consumer_settles_but_cannot_enqueue_delete_or_unsuppress(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_consumer") as url:
        with psycopg.connect(url) as conn:
            conn.execute("UPDATE email_sends SET status = 'sending' WHERE dedupe_key = 'seed'")
            # a first claim records its provider's kind (migration 0071)
            conn.execute("UPDATE email_sends SET provider_kind = 'x' WHERE dedupe_key = 'seed'")
            conn.execute("SELECT 1 FROM email_suppressions")
            # an outcome records its event through the trigger (no grant of its own)
            conn.execute("UPDATE email_sends SET status = 'accepted' WHERE dedupe_key = 'seed'")
            conn.execute(
                "INSERT INTO recovery_pacing (provider) VALUES ('p') ON CONFLICT DO NOTHING"
            )
            # its claim refuses the rows of a paused or cancelled campaign
            conn.execute("SELECT id, state FROM campaigns")
        assert refused(url, "SELECT * FROM email_send_events")
        assert refused(url, "DELETE FROM email_sends")
        assert refused(url, "DELETE FROM email_suppressions")
        assert refused(
            url,
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('c-1', 'f@x.org', 't')",
        )
        assert refused(url, "UPDATE email_attempts SET status_code = 200")
        assert refused(url, "UPDATE campaigns SET state = 'running'")


def test_intake_inserts_but_cannot_change_or_read_suppressions(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_intake") as url:
        assert refused(url, "UPDATE email_sends SET status = 'cancelled'")
        assert refused(url, "DELETE FROM email_sends")
        assert refused(url, "SELECT * FROM email_suppressions")
        assert refused(url, "SELECT to_address FROM email_sends")


def test_webhooks_suppress_but_cannot_unsuppress_or_enqueue(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_webhooks") as url:
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO email_suppressions (address, reason, source)"
                " VALUES ('g@x.org', 'bounce', 'p')"
            )
        assert refused(url, "DELETE FROM email_suppressions")
        assert refused(
            url,
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('w-1', 'h@x.org', 't')",
        )
        assert refused(url, "SELECT * FROM email_attempts")


def test_webhooks_widen_an_unsubscribe_to_all_mail_after_a_hard_bounce(roles_db: str) -> None:
    with psycopg.connect(roles_db) as conn:
        conn.execute("UPDATE email_sends SET message_id = 'm-1' WHERE dedupe_key = 'seed'")
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source)"
            " VALUES ('a@x.org', 'unsubscribed', 'campaign:1')"
        )
    bounce = DeliveryEvent("e-1", "bounced", "m-1", datetime.now(UTC), "hard")

    async def record(url: str) -> Recorded:
        store = EventStore(url, max_connections=1)
        await store.open()
        try:
            return await store.record("sandbox", bounce)
        finally:
            await store.close()

    with login_as(roles_db, "mailbus_webhooks") as url:
        assert asyncio.run(record(url)).suppressed == 1
        assert refused(url, "UPDATE email_suppressions SET address = 'z@x.org'")
    with psycopg.connect(roles_db) as conn:
        assert conn.execute(
            "SELECT reason, source, scope FROM email_suppressions WHERE address = 'a@x.org'"
        ).fetchall() == [("hard_bounce", "webhook:sandbox", "all")]


def test_operator_reads_and_manages_but_never_deletes_sends_or_changes_the_schema(
    roles_db: str,
) -> None:
    with login_as(roles_db, "mailbus_operator") as url:
        with psycopg.connect(url) as conn:
            conn.execute("SELECT * FROM email_sends, email_attempts, email_dead_letters")
            conn.execute("DELETE FROM email_suppressions WHERE address = 'b@x.org'")
        assert refused(url, "DELETE FROM email_sends")
        assert refused(url, "TRUNCATE email_attempts")
        assert refused(url, "DROP TABLE email_sends")
        assert refused(url, "ALTER TABLE email_sends ADD COLUMN x int")


def test_operator_creates_and_runs_a_campaign(roles_db: str, tmp_path: Path) -> None:
    """`campaign run` paces in the foreground: the pacer inserts sends and marks the
    suppressed recipients (b@x.org is suppressed by the fixture)."""
    audience = tmp_path / "a.csv"
    audience.write_text("user_id,email\n1,a1@x.org\n2,b@x.org\n3,a3@x.org\n")
    with login_as(roles_db, "mailbus_operator") as url:
        env = {"MAILBUS_DATABASE_URL": url}
        created = run_mailbus(
            "campaign", "create", "--name", "ops", "--template", "newsletter",
            "--audience", str(audience), env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        campaign_id = created.stdout.strip().splitlines()[-1]
        ran = run_mailbus("campaign", "run", campaign_id, "--no-progress", env=env)
        assert ran.returncode == 0, ran.stderr
        assert f"campaign {campaign_id} is running: handed out 3 of 3" in ran.stdout
        assert refused(url, "DELETE FROM email_sends")
    with psycopg.connect(roles_db) as conn:
        rows = conn.execute(
            "SELECT to_address FROM email_sends WHERE campaign_id = %s ORDER BY id",
            (int(campaign_id),),
        ).fetchall()
    assert rows == [("a1@x.org",), ("a3@x.org",)]


def test_console_reads_and_acts_but_cannot_read_payloads_rewrite_sends_or_forge_audit(
    roles_db: str,
) -> None:
    """Review hole 15: the console ran as mailbus_operator."""
    with psycopg.connect(roles_db) as conn:
        conn.execute(
            "UPDATE email_sends SET payload_json = '{\"token\": \"t-1\"}', status = 'failed'"
        )
        seed = conn.execute("SELECT id FROM email_sends").fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO campaigns (name, template, priority, rate_per_min, audience)"
            " VALUES ('c', 'newsletter', 'p2', 60, 'x')"
        )
    with login_as(roles_db, "mailbus_console") as url:
        with psycopg.connect(url) as conn:  # what its pages and actions do
            assert conn.execute(
                "SELECT to_address, variables FROM email_sends_shown"
            ).fetchall() == [("a@x.org", ["token"])]
            conn.execute("UPDATE campaigns SET state = 'cancelled'")
            conn.execute("DELETE FROM email_suppressions WHERE address = 'b@x.org'")
            conn.execute(
                "INSERT INTO console_audit (who, role, action) VALUES ('ana', 'operator', 'login')"
            )
            login = conn.execute("SELECT session_user").fetchone()
        assert refused(url, "SELECT payload_json FROM email_sends")
        assert refused(url, "SELECT * FROM email_sends")
        assert refused(url, "SELECT lease_token FROM email_sends")
        assert refused(url, "UPDATE email_sends SET to_address = 'x@evil.example'")
        assert refused(url, "UPDATE email_sends SET status = 'pending', attempts = 0")
        assert refused(url, "UPDATE email_sends SET next_try_at = now()")
        with psycopg.connect(url) as conn:  # a replay's reset with no dead letter replayed
            assert conn.execute("SELECT * FROM mailbus_replay_send(%s)", (seed,)).fetchall() == []
        assert refused(url, "UPDATE email_sends SET payload_json = '{}'")
        assert refused(url, "UPDATE email_sends SET message_id = 'forged'")
        assert refused(url, "DELETE FROM email_sends WHERE status = 'pending'")
        assert refused(url, "SELECT original_value FROM email_dead_letters")
        assert refused(url, "SELECT email FROM campaign_recipients")
        assert refused(url, "SELECT variables FROM campaign_recipients")
        assert refused(url, "UPDATE console_audit SET who = 'vic'")
        assert refused(url, "DELETE FROM console_audit")
        assert refused(
            url,
            "INSERT INTO console_audit (who, role, action, db_user)"
            " VALUES ('ana', 'operator', 'login', 'someone')",
        )
        assert refused(
            url,
            "INSERT INTO console_audit (who, role, action, at)"
            " VALUES ('ana', 'operator', 'login', now() - interval '1 year')",
        )
        assert refused(url, "TRUNCATE console_audit")
    with psycopg.connect(roles_db) as conn:
        assert conn.execute("SELECT status FROM email_sends").fetchall() == [("failed",)]
        assert conn.execute("SELECT who, db_user FROM console_audit").fetchall() == [
            ("ana", login[0])  # type: ignore[index]
        ]


def test_no_one_but_the_console_writes_its_audit_and_no_one_rewrites_it(roles_db: str) -> None:
    with login_as(roles_db, "mailbus_operator") as url:
        assert refused(
            url,
            "INSERT INTO console_audit (who, role, action) VALUES ('ana', 'operator', 'login')",
        )
    with psycopg.connect(roles_db) as conn:  # the owner: the trigger stamps it, and holds
        conn.execute(
            "INSERT INTO console_audit (who, role, action, db_user)"
            " VALUES ('ana', 'operator', 'login', 'forged')"
        )
        assert conn.execute("SELECT db_user = session_user FROM console_audit").fetchone() == (
            True,
        )
    assert refused(roles_db, "UPDATE console_audit SET who = 'vic'")


def test_a_campaign_paused_then_held_again_resumes_its_mail(roles_db: str) -> None:
    """mailbus_campaign_hold checks only that the campaign is paused: a console taken over
    (or a second caller) running it again while paused pushed the rows another century
    back, and the resume's one century off left them held for good (a running campaign
    that never sends nor finishes). A held row is held once."""
    with psycopg.connect(roles_db) as conn:
        campaign = conn.execute(
            "INSERT INTO campaigns (name, template, priority, rate_per_min, audience, state)"
            " VALUES ('c', 'newsletter', 'p2', 60, 'x', 'paused') RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, campaign_id)"
            " VALUES ('c-1', 'a1@x.org', 'newsletter', %s)",
            (campaign,),
        )
    with login_as(roles_db, "mailbus_console") as url, psycopg.connect(url) as conn:
        for _ in range(3):
            conn.execute("SELECT * FROM mailbus_campaign_hold(%s)", (campaign,))
            conn.commit()
        conn.execute("UPDATE campaigns SET state = 'running' WHERE id = %s", (campaign,))
        conn.execute("SELECT * FROM mailbus_campaign_release(%s)", (campaign,))
        conn.commit()
    with psycopg.connect(roles_db) as conn:
        due = conn.execute(
            "SELECT next_try_at <= now() + interval '1 minute' FROM email_sends"
            " WHERE dedupe_key = 'c-1'"
        ).fetchone()
    assert due == (True,)


def test_the_relays_reputation_guard_measures_and_pauses(roles_db: str) -> None:
    with psycopg.connect(roles_db) as conn:
        [(campaign_id,)] = conn.execute(
            "INSERT INTO campaigns (name, template, rate_per_min, state, guarded_since)"
            " VALUES ('c', 'newsletter', 60, 'running', now() - interval '1 hour')"
            " RETURNING id"
        ).fetchall()
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, campaign_id, status,"
            " message_id, accepted_at) VALUES ('r-1', 'r@x.org', 't', %s, 'accepted', 'm-r1',"
            " now())",
            (campaign_id,),
        )
        conn.execute(
            "INSERT INTO delivery_events (provider, event_id, type, bounce, message_id,"
            " occurred_at, matched) VALUES ('http', 'e-r1', 'bounced', 'hard', 'm-r1', now(), true)"
        )
    with login_as(roles_db, "mailbus_relay") as url:
        guard = ReputationGuard(
            url, thresholds=Thresholds(min_sends=1), window_s=3600, primary="http", interval_s=60
        )
        with psycopg.connect(url, autocommit=True) as conn:
            pauses = guard.check(conn)
        assert pauses is not None and [p.campaign_id for p in pauses] == [campaign_id]
        assert refused(url, "UPDATE campaigns SET name = 'x'")
        assert refused(url, "SELECT to_address FROM email_sends")
