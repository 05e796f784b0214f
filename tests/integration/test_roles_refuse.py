"""Roles that hold (docs/guides/security.md#least-privilege): as a login of each group role,
on the real PostgreSQL, what its process runs succeeds, and what a leaked credential would
try — read a payload, redirect a send, put a sent mail back, delete a pending send, forge a
dead letter or an audit row — is refused with `permission denied` (issue 35)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege, InvalidParameterValue
from psycopg.types.json import Jsonb
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.app.migration_files import available_migrations
from mailbus.feedback.events import NAMED_PROVIDERS, STATUS_RANK
from mailbus_client.sqlfiles import load_queries
from mailbus_client.steps import client_queries

pytestmark = pytest.mark.stack

FORGE_AUDIT = "INSERT INTO console_audit (who, role, action) VALUES ('ana', 'operator', 'login')"
SETTLED_LONG_AGO = "now() - interval '100 days'"

RELAY = load_queries("mailbus.relay", "queries.sql")
CAMPAIGNS = load_queries("mailbus.campaigns", "queries.sql")
CONSUMER = load_queries("mailbus.consumer", "queries.sql")
SEND_ADMIN = load_queries("mailbus.consumer", "send_admin.sql")
CLIENT = client_queries()
FEEDBACK = load_queries("mailbus.feedback", "events.sql")
UNSUBSCRIBE = load_queries("mailbus.feedback", "unsubscribe.sql")["unsubscribe"]
LETTERS = load_queries("mailbus.consumer", "dead_letters.sql")

# a hard bounce's suppression (all mail) narrowed to bulk mail only: a password reset
# goes to the bouncing address again; only a role that may remove a suppression may
NARROW = "UPDATE email_suppressions SET reason = 'unsubscribed' WHERE address = 'hb@x.org'"
NARROW_ON_CONFLICT = (
    "INSERT INTO email_suppressions (address, reason, source) VALUES ('hb@x.org', 'complaint',"
    " 'x') ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason"
)

# What each role's process runs (a named query of its .sql file where it takes simple
# parameters), then what it must never run.
MUST: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "mailbus_webhooks": [
        (
            "SELECT id, to_address, delivery_status, last_event_at FROM email_sends"
            " WHERE message_id = 'm-1'",
            {},
        ),
        (
            "UPDATE email_sends SET delivery_status = 'delivered', last_event_at = now()"
            " WHERE message_id = 'm-1'",
            {},
        ),
        (
            "INSERT INTO delivery_events (provider, event_id, type, message_id, occurred_at,"
            " matched) VALUES ('p', 'e-2', 'delivered', 'm-1', now(), true)",
            {},
        ),
        (  # e-1 matches now
            FEEDBACK["apply_late_events"],
            {"ranks": list(STATUS_RANK), "through": "{}", "named": list(NAMED_PROVIDERS)},
        ),
        (FEEDBACK["kept_settlements"], {}),
        (  # an unknown send settled by its own provider's event carrying its key
            FEEDBACK["settle_from_events"],
            {
                "settle": '[{"provider": "sendgrid", "dedupe_key": "unknown-k",'
                ' "key": "unknown-k", "message_id": "sg-1"}]',
                "through": "{}",
            },
        ),
        (UNSUBSCRIBE, {"address": "U@x.org", "source": "campaign:1"}),
        ("UPDATE email_suppressions SET reason = 'hard_bounce' WHERE address = 'u@x.org'", {}),
    ],
    "mailbus_relay": [
        (RELAY["claim_due"], {"limit": 10}),
        (RELAY["claim_due_beside_p0"], {"limit": 10}),
        (RELAY["unclaim"], {"ids": [1, 2, 3]}),
        (
            RELAY["seconds_until_next_due"],
            {"priorities": ["p0"], "claimable_after_s": [0.0], "since_claim_s": 0.0},
        ),
        (RELAY["claim_dead_letters"], {"limit": 10}),
        (CAMPAIGNS["open_rows"], {}),
        (CAMPAIGNS["open_mail"], {"id": 1}),
        (
            "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority,"
            " campaign_id) VALUES ('campaign-1-user-1', 'c@x.org', 't', '{}', 'p2', 1)"
            " ON CONFLICT (dedupe_key) DO NOTHING",
            {},
        ),
        ("UPDATE campaign_recipients SET suppressed = true WHERE campaign_id = 1", {}),
        ("UPDATE campaigns SET checkpoint = 1, processed = processed + 1 WHERE id = 1", {}),
    ],
    "mailbus_consumer": [
        (CONSUMER["load_sends"], {"ids": [1, 2]}),
        (
            CONSUMER["claim_first_attempt"],
            {
                "claims": Jsonb(  # no such row: the privileges are checked all the same
                    [
                        {
                            "id": 1,
                            "dedupe_key": "no-such-key",
                            "token": "00000000-0000-4000-8000-000000000001",
                            "provider": None,
                            "provider_kind": "http",
                            "guarantee": "exactly_once",
                            "provider_key": "no-such-key",
                        }
                    ]
                ),
                "lease_s": 30.0,
                "headroom_s": 0.05,
            },
        ),
        (CONSUMER["republish_stale"], {"priorities": ["p0"], "after_s": 60, "limit": 10}),
        (
            "UPDATE email_sends SET status = 'sending', attempts = attempts + 1,"
            " lease_token = gen_random_uuid(), lease_until = now(), provider = 'sandbox',"
            " provider_kind = 'http', first_tried_at = now() WHERE dedupe_key = 'pending'",
            {},
        ),
        (
            "UPDATE email_sends SET status = 'accepted', message_id = 'm-2', accepted_at = now(),"
            " lease_token = NULL, lease_until = NULL WHERE dedupe_key = 'pending'",
            {},
        ),
    ],
    "mailbus_intake": [
        ("SELECT id FROM email_sends WHERE dedupe_key = 'pending'", {}),
        (
            "INSERT INTO email_dead_letters (reason, error, original_topic, original_partition,"
            " original_offset, published_at) VALUES ('intake_invalid', 'e', 't', 0, 1, now())",
            {},
        ),
    ],
    "mailbus_enqueuer": [
        (
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('new', 'e@x.org', 't') ON CONFLICT (dedupe_key) DO NOTHING",
            {},
        ),
    ],
    "mailbus_operator": [
        (CLIENT["cancel_send"], {"key": "pending", "by": "test"}),
        (LETTERS["mark_replayed"], {"id": 1}),
        (LETTERS["link_send"], {"id": 1, "send_id": 1}),
        (LETTERS["reset_send"], {"send_id": 1}),
        ("UPDATE email_sends SET status = 'unknown' WHERE dedupe_key = 'settled'", {}),
        (SEND_ADMIN["resolve_not_sent"], {"key": "settled"}),  # forgets its kind (0071)
        ("UPDATE email_sends SET status = 'unknown' WHERE dedupe_key = 'settled'", {}),
        (SEND_ADMIN["resolve_accepted"], {"key": "settled", "message_id": "m-3"}),
        (SEND_ADMIN["send_by_key"], {"key": "pending"}),
        (NARROW, {}),  # it may remove the entry as well
    ],
    "mailbus_console": [  # a campaign created from an upload, imported, then moved
        (CAMPAIGNS["campaign_named"], {"name": "c"}),
        (
            CAMPAIGNS["insert_campaign"],
            {
                "name": "new",
                "template": "t",
                "priority": "p2",
                "rate_per_min": 60,
                "window_start": None,
                "window_end": None,
                "daily_cap": 1000,
                "warmup": [],
                "audience": "upload: a.csv",
            },
        ),
        (CAMPAIGNS["import_position"], {"id": 1}),
        ("UPDATE campaigns SET importing = true WHERE id = 1", {}),  # as a new one is
        (
            CAMPAIGNS["record_part"],
            {"id": 1, "stored": 1, "rejected": 0, "through": 2, "key": None},
        ),
        (CAMPAIGNS["lock_importing"], {"id": 1}),
        (
            CAMPAIGNS["finish_import"],
            {"id": 1, "repeated": 0, "handed_out": 0, "handed_out_suppressed": 0},
        ),
        (
            CAMPAIGNS["transition"],
            {"id": 1, "to_state": "paused", "from_states": ["running"], "reason": None},
        ),
    ],
    "mailbus_retention": [
        ("SELECT mailbus_prune('sends', 90 * 86400, 100)", {}),
        ("SELECT mailbus_prune('dead letters', 90 * 86400, 100)", {}),
        ("SELECT mailbus_prune('delivery events', 90 * 86400, 100)", {}),
        (
            "SELECT set_config('mailbus.retention_s', '7776000', true),"
            " (SELECT count(*) FROM email_sends_past_retention)",
            {},
        ),
    ],
}
REDIRECT = "UPDATE email_sends SET to_address = 'attacker@x.org' WHERE status = 'pending'"
RESEND = "UPDATE email_sends SET status = 'pending', attempts = 0, published_at = NULL"
FORGE_LETTER = (
    "INSERT INTO email_dead_letters (send_id, reason, attempts) VALUES (1, 'rejected', 1)"
)
# What an operator chose when creating a campaign: the console inserts, never changes them.
CAMPAIGN_SETTINGS = [
    ("rate_per_min", "1000000"),
    ("daily_cap", "NULL"),
    ("warmup", "'{}'"),
    ("window_start", "NULL"),
    ("window_end", "NULL"),
    ("template", "'t2'"),
    ("priority", "'p0'"),
    ("audience", "'upload: other.csv'"),
    ("name", "'other'"),
]
MUST_NOT: dict[str, list[str]] = {
    "mailbus_webhooks": [
        "SELECT payload_json FROM email_sends WHERE priority = 'p0'",
        "SELECT template, dedupe_key FROM email_sends",
        REDIRECT,
        RESEND,
        # a pending mail dropped or an accepted one sent again (the consumer republishes a
        # pending row published long ago): settle_from_events goes through its function
        "UPDATE email_sends SET status = 'accepted' WHERE status = 'pending'",
        "UPDATE email_sends SET status = 'expired' WHERE status = 'pending'",
        "UPDATE email_sends SET status = 'pending', next_try_at = NULL WHERE status = 'accepted'",
        "UPDATE email_sends SET message_id = 'm-x' WHERE status = 'accepted'",
        "UPDATE email_sends SET payload_json = '{}'",
        "UPDATE delivery_events SET type = 'delivered'",
        "DELETE FROM delivery_events",
        "SELECT * FROM email_dead_letters",
        NARROW,
        NARROW_ON_CONFLICT,
        FORGE_LETTER,
        FORGE_AUDIT,
    ],
    "mailbus_relay": [
        "SELECT payload_json FROM email_sends",
        "SELECT to_address FROM email_sends",
        REDIRECT,
        RESEND,
        "UPDATE email_sends SET status = 'accepted'",
        "UPDATE email_dead_letters SET original_value = 'x'",
        "UPDATE campaign_recipients SET email = 'attacker@x.org'",
        "UPDATE campaigns SET template = 't2'",
        "INSERT INTO email_sends (dedupe_key, to_address, template, status)"
        " VALUES ('r-1', 'f@x.org', 't', 'accepted')",
        FORGE_LETTER,
        FORGE_AUDIT,
    ],
    "mailbus_consumer": [
        REDIRECT,
        "UPDATE email_sends SET payload_json = '{}'",
        "UPDATE email_sends SET template = 't2', priority = 'p0'",
        "UPDATE email_sends SET expires_at = NULL, campaign_id = NULL",
        "UPDATE email_sends SET delivery_status = 'delivered'",
        "DELETE FROM email_dead_letters",
        NARROW,
        NARROW_ON_CONFLICT,
        FORGE_AUDIT,
    ],
    "mailbus_intake": [
        "SELECT payload_json FROM email_sends",
        REDIRECT,
        "SELECT * FROM email_suppressions",
        FORGE_LETTER,
        FORGE_AUDIT,
    ],
    "mailbus_enqueuer": [
        "SELECT payload_json FROM email_sends",
        REDIRECT,
        "SELECT * FROM email_suppressions",
        FORGE_LETTER,
        FORGE_AUDIT,
    ],
    "mailbus_operator": [
        REDIRECT,
        "UPDATE email_sends SET payload_json = '{}', template = 't2'",
        "UPDATE email_sends SET dedupe_key = 'other', priority = 'p0', campaign_id = NULL",
        "UPDATE email_sends SET delivery_status = 'delivered'",
        "UPDATE email_dead_letters SET original_value = 'x', reason = 'rejected'",
        "DELETE FROM email_sends WHERE status = 'pending'",
        "TRUNCATE email_sends",
        "SELECT mailbus_prune('sends', 86400, 100)",
    ],
    "mailbus_console": [  # the campaign columns its statements never write (migration 0063)
        *(f"UPDATE campaigns SET {column} = {value}" for column, value in CAMPAIGN_SETTINGS),
        "UPDATE campaigns SET checkpoint = 1000000",  # its recipients skipped
        "UPDATE campaigns SET created_rows = 0",
        "UPDATE campaigns SET day = NULL",
        "UPDATE campaigns SET day_count = 0",
        "UPDATE campaigns SET created_at = now()",
        "INSERT INTO campaigns (name, template, rate_per_min, state)"
        " VALUES ('x', 't', 60, 'running')",
        "INSERT INTO campaigns (name, template, rate_per_min, checkpoint) VALUES ('x', 't', 60, 9)",
        "DELETE FROM campaigns",
        "UPDATE campaign_recipients SET email = 'attacker@x.org'",
        REDIRECT,
        RESEND,
    ],
    "mailbus_retention": [
        "DELETE FROM email_sends WHERE id = 1",  # the pending send (its status is unreadable)
        "DELETE FROM email_sends",
        "DELETE FROM email_dead_letters",
        "DELETE FROM email_replays",
        "DELETE FROM delivery_events",
        "SELECT to_address FROM email_sends",
        "SELECT id FROM email_sends",
        "SELECT id FROM email_sends_past_retention FOR UPDATE",
        FORGE_AUDIT,
    ],
}


@pytest.fixture
def seeded(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with psycopg.connect(database_url) as conn:
        pending = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
            " VALUES ('pending', 'a@x.org', 't', '{\"reset\": \"secret\"}', 'p0') RETURNING id"
        ).fetchone()
        assert pending == (1,)  # the statements below name it by id
        conn.execute(
            f"INSERT INTO email_sends (dedupe_key, to_address, template, status, message_id,"
            f" created_at, updated_at) VALUES ('settled', 'b@x.org', 't', 'accepted', 'm-1',"
            f" {SETTLED_LONG_AGO}, {SETTLED_LONG_AGO})"
        )
        conn.execute(
            "INSERT INTO email_dead_letters (reason, error, original_topic, original_partition,"
            " original_offset) VALUES ('undecodable', 'e', 't', 0, 0)"
        )
        conn.execute(
            "INSERT INTO delivery_events (provider, event_id, type, message_id, occurred_at,"
            " matched) VALUES ('p', 'e-1', 'delivered', 'm-1', now(), false)"
        )
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source)"
            " VALUES ('hb@x.org', 'hard_bounce', 'test')"
        )
        conn.execute(
            "INSERT INTO campaigns (name, template, state, rate_per_min)"
            " VALUES ('c', 't', 'running', 60)"
        )
        conn.execute(
            "INSERT INTO campaign_recipients (campaign_id, ordinal, user_id, email)"
            " VALUES (1, 1, '1', 'c@x.org')"
        )
    yield database_url


def refused(url: str, statement: str) -> bool:
    with psycopg.connect(url) as conn:
        try:
            conn.execute(statement)
        except InsufficientPrivilege:
            return True
        conn.rollback()  # allowed: leave nothing changed for the next statement
        return False


@pytest.mark.parametrize("role", sorted(MUST_NOT))
def test_each_role_runs_its_statements_and_is_refused_the_rest(seeded: str, role: str) -> None:
    with login_as(seeded, role) as url:
        with psycopg.connect(url) as conn:
            for statement, params in MUST[role]:
                conn.execute(statement, params)
            conn.rollback()
        allowed = [statement for statement in MUST_NOT[role] if not refused(url, statement)]
    assert allowed == [], f"{role} may run what it must not"


def test_retention_deletes_only_settled_mail_past_a_window_of_at_least_its_floor(
    seeded: str,
) -> None:
    with login_as(seeded, "mailbus_retention") as url, psycopg.connect(url) as conn:
        for window in ("86400", "3600", "0", "-1", "NULL", "'NaN'", "'Infinity'"):  # refused
            with pytest.raises(InvalidParameterValue):
                conn.execute(f"SELECT mailbus_prune('sends', {window}, 100)")
            conn.rollback()
        with pytest.raises(InvalidParameterValue):
            conn.execute("SELECT mailbus_prune('email_sends', 90 * 86400, 100)")
        conn.rollback()
        # the shortest window it takes (the default floor, 90 days) deletes the 100-day-old
        # settled send, never the pending
        assert conn.execute("SELECT mailbus_prune('sends', 90 * 86400, 100)").fetchone() == (1,)
        conn.commit()
    with psycopg.connect(seeded) as conn:
        keys = [key for (key,) in conn.execute("SELECT dedupe_key FROM email_sends")]
    assert keys == ["pending"]


def test_the_prune_function_is_no_one_elses(seeded: str) -> None:
    for role in sorted(set(MUST_NOT) - {"mailbus_retention", "mailbus_operator"}):
        with login_as(seeded, role) as url:
            assert refused(url, "SELECT mailbus_prune('sends', 86400, 100)"), role


def test_a_plain_migrate_narrows_the_console_on_campaigns_as_the_grants_do(seeded: str) -> None:
    """Migration 0063 on a database whose grants predate it (a plain `mailbus migrate`)."""
    narrowing = next(m for m in available_migrations() if m.version == 63)

    def privileges(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        return conn.execute(
            "SELECT column_name, privilege_type FROM information_schema.column_privileges"
            " WHERE grantee = 'mailbus_console' AND table_name = 'campaigns'"
            " AND privilege_type <> 'SELECT' ORDER BY 1, 2"
        ).fetchall()

    with psycopg.connect(seeded, autocommit=True) as conn:
        granted = privileges(conn)  # by grants.sql (`migrate --roles`)
        assert ("rate_per_min", "INSERT") in granted and ("state", "UPDATE") in granted
        conn.execute("GRANT INSERT, UPDATE ON campaigns TO mailbus_console")  # before 0063
        assert ("rate_per_min", "UPDATE") in privileges(conn)
        conn.execute(narrowing.sql.encode())
        assert privileges(conn) == granted


def test_a_plain_migrate_lets_the_relay_claim_what_its_pointer_header_needs(seeded: str) -> None:
    """Migration 0076 on a database whose grants predate it (a plain `mailbus migrate`): the
    relay's claims read `template` and `first_tried_at`, or every one is refused."""
    granting = next(m for m in available_migrations() if m.version == 76)
    claims = [RELAY[name] for name in ("claim_due", "claim_due_p0", "claim_due_beside_p0")]
    with psycopg.connect(seeded, autocommit=True) as conn:  # the grants before 0076
        conn.execute("REVOKE SELECT (template, first_tried_at) ON email_sends FROM mailbus_relay")

    def denied(url: str) -> list[bool]:
        found = []
        for claim in claims:
            with psycopg.connect(url) as conn:
                try:
                    conn.execute(claim, {"limit": 10})
                    found.append(False)
                except InsufficientPrivilege:
                    found.append(True)
                conn.rollback()
        return found

    with login_as(seeded, "mailbus_relay") as url:
        assert denied(url) == [True, True, True]
        with psycopg.connect(seeded, autocommit=True) as conn:
            conn.execute(granting.sql.encode())
        assert denied(url) == [False, False, False]


def test_webhooks_settle_a_send_only_through_their_function(seeded: str) -> None:
    settle = FEEDBACK["settle_from_events"]
    with psycopg.connect(seeded) as conn:  # an unknown SendGrid send beside the pending one
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, provider)"
            " VALUES ('unknown-k', 'u@x.org', 't', 'unknown', 'sendgrid')"
        )
    events = [
        {"provider": "sendgrid", "dedupe_key": key, "key": key, "message_id": f"sg-{key}"}
        for key in ("pending", "settled", "unknown-k")
    ]
    with login_as(seeded, "mailbus_webhooks") as url, psycopg.connect(url) as conn:
        done = conn.execute(settle, {"settle": json.dumps(events), "through": "{}"}).fetchall()
    assert done == [("unknown-k",)]
    with psycopg.connect(seeded) as conn:
        rows = conn.execute(
            "SELECT dedupe_key, status, message_id FROM email_sends ORDER BY id"
        ).fetchall()
    assert rows == [
        ("pending", "pending", None),
        ("settled", "accepted", "m-1"),
        ("unknown-k", "accepted", "sg-unknown-k"),
    ]


def test_a_replay_is_stamped_with_its_login_and_time_by_the_database(seeded: str) -> None:
    with psycopg.connect(seeded) as conn:
        conn.execute(
            "INSERT INTO email_dead_letters (send_id, reason, attempts) VALUES (2, 'rejected', 1)"
        )
    with login_as(seeded, "mailbus_console") as url, psycopg.connect(url) as conn:
        login = conn.execute("SELECT session_user").fetchone()
        conn.execute(
            "INSERT INTO email_replays (dead_letter_id, send_id, replayed_by, reason, at,"
            " db_user) VALUES (2, 2, 'ana', 'forged', '2000-01-01', 'ana')"
        )
    with psycopg.connect(seeded) as conn:
        rows = conn.execute(
            "SELECT replayed_by, db_user, at > now() - interval '1 minute' FROM email_replays"
        ).fetchall()
    assert login is not None
    assert rows == [("ana", login[0], True)]


def test_a_send_resolution_is_stamped_with_its_login_and_time_by_the_database(
    seeded: str,
) -> None:
    with login_as(seeded, "mailbus_operator") as url, psycopg.connect(url) as conn:
        login = conn.execute("SELECT session_user").fetchone()
        conn.execute(  # another name and a time of its choosing: the database's own win
            "INSERT INTO email_send_resolutions (send_id, action, from_status, resolved_by, at,"
            " db_user) VALUES (2, 'accepted', 'unknown', 'ana', '2000-01-01', 'ana')"
        )
        conn.execute(CLIENT["cancel_send"], {"key": "pending", "by": "bob"})
    with psycopg.connect(seeded) as conn:
        rows = conn.execute(
            "SELECT resolved_by, db_user, at > now() - interval '1 minute'"
            " FROM email_send_resolutions ORDER BY id"
        ).fetchall()
    assert login is not None
    assert rows == [("ana", login[0], True), ("bob", login[0], True)]


@pytest.mark.parametrize(
    "forged",
    [
        "UPDATE campaigns SET state = 'finished', ended_at = now() - interval '400 days'",
        "UPDATE campaigns SET state = 'finished', ended_at = NULL,"
        " updated_at = now() - interval '400 days'",
    ],
)
def test_the_relay_cannot_date_a_campaigns_end_for_retention(seeded: str, forged: str) -> None:
    # a leaked relay login ends the running campaign 400 days ago: the next retention run
    # would delete its audience (under the shortest window it may use: the table's floor)
    with login_as(seeded, "mailbus_relay") as url, psycopg.connect(url) as conn:
        conn.execute(forged + " WHERE id = 1")
    with login_as(seeded, "mailbus_retention") as url, psycopg.connect(url) as conn:
        for what in ("campaign recipients", "campaigns"):
            conn.execute(
                "SELECT mailbus_prune_history(f.what, f.floor_s, 100) FROM retention_floors f"
                " WHERE f.what = %s",
                (what,),
            )
    with psycopg.connect(seeded) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM campaign_recipients),"
            " ended_at > now() - interval '1 minute' FROM campaigns"
        ).fetchall()
    assert left == [(1, True)]  # ended now, by the database's clock: nothing is past a window


# A role's own temporary table with the columns the outcome-event trigger reads: attached
# to it, the trigger function (SECURITY DEFINER, the owner's rights) writes whatever row
# the role inserts there into email_send_events, which the relay publishes as the outcome
# of a real send: here, mail 1 (pending) "accepted" and "delivered".
FORGE_OUTCOME = (
    "CREATE TEMP TABLE forged (id bigint, dedupe_key text, template text, status text,"
    " delivery_status text, message_id text, last_error text, updated_at timestamptz,"
    " last_event_at timestamptz);"
    " CREATE TRIGGER forge AFTER INSERT ON forged FOR EACH ROW"
    " EXECUTE FUNCTION mailbus_record_send_event();"
    " INSERT INTO forged VALUES (1, 'pending', 't', 'accepted', 'delivered', 'm-x', NULL,"
    " now(), now())"
)


@pytest.mark.parametrize("role", sorted(MUST_NOT))
def test_no_role_attaches_a_trigger_function_of_mailbus_to_a_table_of_its_own(
    seeded: str, role: str
) -> None:
    """PostgreSQL grants EXECUTE on a new function to PUBLIC, and creating a trigger needs
    only that: the grants take it back (a trigger fires whatever the writer's rights)."""
    with login_as(seeded, role) as url:
        assert refused(url, FORGE_OUTCOME), role
        with psycopg.connect(url) as conn:  # the triggers of mailbus's tables still fire
            conn.execute("CREATE TEMP TABLE mine (id int)")
            conn.rollback()
