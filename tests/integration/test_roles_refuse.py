"""Roles that hold (docs/guides/security.md#least-privilege): as a login of each group role,
on the real PostgreSQL, what its process runs succeeds, and what a leaked credential would
try — read a payload, redirect a send, put a sent mail back, delete a pending send, forge a
dead letter or an audit row — is refused with `permission denied` (issue 35)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.errors import InsufficientPrivilege, InvalidParameterValue
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.feedback.events import NAMED_PROVIDERS, STATUS_RANK
from mailbus_client.sqlfiles import load_queries

pytestmark = pytest.mark.stack

FORGE_AUDIT = "INSERT INTO console_audit (who, role, action) VALUES ('ana', 'operator', 'login')"
SETTLED_LONG_AGO = "now() - interval '100 days'"

RELAY = load_queries("mailbus.relay", "queries.sql")
CAMPAIGNS = load_queries("mailbus.campaigns", "queries.sql")
CONSUMER = load_queries("mailbus.consumer", "queries.sql")
SEND_ADMIN = load_queries("mailbus.consumer", "send_admin.sql")
CLIENT = load_queries("mailbus_client", "queries.sql")
FEEDBACK = load_queries("mailbus.feedback", "events.sql")
UNSUBSCRIBE = load_queries("mailbus.feedback", "unsubscribe.sql")["unsubscribe"]
LETTERS = load_queries("mailbus.consumer", "dead_letters.sql")

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
            {"ranks": list(STATUS_RANK), "primary": None, "named": list(NAMED_PROVIDERS)},
        ),
        (  # an unknown send settled by its own provider's event carrying its key
            FEEDBACK["settle_unknown"],
            {
                "settle": '[{"provider": "sendgrid", "dedupe_key": "unknown-k",'
                ' "key": "unknown-k", "message_id": "sg-1"}]',
                "primary": None,
            },
        ),
        (UNSUBSCRIBE, {"address": "U@x.org", "source": "campaign:1"}),
    ],
    "mailbus_relay": [
        (RELAY["claim_due"], {"limit": 10}),
        (RELAY["claim_due_beside_p0"], {"limit": 10}),
        (RELAY["unclaim"], {"ids": [1, 2, 3]}),
        (RELAY["seconds_until_next_due"], {}),
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
        (CONSUMER["republish_stale"], {"priorities": ["p0"], "after_s": 60, "limit": 10}),
        (
            "UPDATE email_sends SET status = 'sending', attempts = attempts + 1,"
            " lease_token = gen_random_uuid(), lease_until = now(), provider = 'sandbox',"
            " first_tried_at = now() WHERE dedupe_key = 'pending'",
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
        (SEND_ADMIN["resolve_accepted"], {"key": "settled", "message_id": "m-3"}),
        (SEND_ADMIN["send_by_key"], {"key": "pending"}),
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
MUST_NOT: dict[str, list[str]] = {
    "mailbus_webhooks": [
        "SELECT payload_json FROM email_sends WHERE priority = 'p0'",
        "SELECT template, dedupe_key FROM email_sends",
        REDIRECT,
        RESEND,
        "UPDATE email_sends SET payload_json = '{}'",
        "UPDATE delivery_events SET type = 'delivered'",
        "DELETE FROM delivery_events",
        "SELECT * FROM email_dead_letters",
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


def test_retention_deletes_only_settled_mail_past_a_window_of_at_least_a_day(
    seeded: str,
) -> None:
    with login_as(seeded, "mailbus_retention") as url, psycopg.connect(url) as conn:
        for window in ("3600", "0", "-1", "NULL", "'NaN'", "'Infinity'"):  # refused
            with pytest.raises(InvalidParameterValue):
                conn.execute(f"SELECT mailbus_prune('sends', {window}, 100)")
            conn.rollback()
        with pytest.raises(InvalidParameterValue):
            conn.execute("SELECT mailbus_prune('email_sends', 90 * 86400, 100)")
        conn.rollback()
        # the shortest window it takes deletes the 100-day-old settled send, never the pending
        assert conn.execute("SELECT mailbus_prune('sends', 86400, 100)").fetchone() == (1,)
        conn.commit()
    with psycopg.connect(seeded) as conn:
        keys = [key for (key,) in conn.execute("SELECT dedupe_key FROM email_sends")]
    assert keys == ["pending"]


def test_the_prune_function_is_no_one_elses(seeded: str) -> None:
    for role in sorted(set(MUST_NOT) - {"mailbus_retention", "mailbus_operator"}):
        with login_as(seeded, role) as url:
            assert refused(url, "SELECT mailbus_prune('sends', 86400, 100)"), role
