"""A synchronous "no such address" suppresses the address in the settle statement itself
(issue 20 item 5), on the real PostgreSQL and as the least-privilege consumer role: as a
webhook hard bounce does, widening an unsubscribe to all mail; a rejection that is not
about the address suppresses nothing."""

from __future__ import annotations

from dataclasses import replace

import psycopg
from ledger_support import ORIGIN, claim, seed, suppressed_at_load, with_ledger
from transport_security import login_as

from mailbus.app.migrate import apply_migrations, apply_roles
from mailbus.consumer.core import Classification, RetryPolicy, Status, after_call
from mailbus.consumer.core.smtp_outcome import SmtpReply, classify_smtp
from mailbus.consumer.ledger import SendLedger

USER_UNKNOWN = classify_smtp(SmtpReply(550, "5.1.1 User unknown", "rcpt"))
POLICY_REFUSAL = classify_smtp(SmtpReply(550, "5.7.1 Message refused", "data"))


def _settle(url: str, calls: list[tuple[int, Classification]]) -> list[bool]:
    """Claim each row and settle the call's ``after_call`` decision, as the consumer does."""

    async def scenario(ledger: SendLedger) -> list[bool]:
        settled = []
        for row_id, result in calls:
            loaded = await ledger.load(row_id)
            assert loaded is not None
            token = await claim(ledger, row_id, 0, None)
            assert token is not None
            row = replace(loaded.view, status=Status.SENDING, attempts=1)
            now = ledger.clock.now()
            decision = after_call(row, result, now, RetryPolicy(), lambda: 0.0, "sync:smtp")
            settled.append(await ledger.settle_call(row, token, decision, ORIGIN, 5))
        return settled

    return list(with_ledger(url, scenario))


def test_a_bad_address_is_suppressed_in_the_settle_statement(database_url: str) -> None:
    apply_roles(database_url)
    first, second, third, later = seed(database_url, 4)
    with psycopg.connect(database_url) as conn:
        conn.execute(  # the second's address unsubscribed: bulk only, widened by the bounce
            "INSERT INTO email_suppressions (address, reason, source)"
            " SELECT to_address, 'unsubscribed', 'link' FROM email_sends WHERE id = %s",
            (second,),
        )
        conn.execute("UPDATE email_sends SET to_address = 'U1@Example.COM' WHERE id = %s", (first,))
        conn.execute("UPDATE email_sends SET to_address = 'u1@example.com' WHERE id = %s", (later,))
        [(second_address,)] = conn.execute(
            "SELECT to_address FROM email_sends WHERE id = %s", (second,)
        ).fetchall()
    calls = [(first, USER_UNKNOWN), (second, USER_UNKNOWN), (third, POLICY_REFUSAL)]
    with login_as(database_url, "mailbus_consumer") as url:
        assert _settle(url, calls) == [True, True, True]
    with psycopg.connect(database_url) as conn:
        statuses = conn.execute("SELECT id, status FROM email_sends ORDER BY id").fetchall()
        suppressions = conn.execute(
            "SELECT address, reason, source, scope FROM email_suppressions ORDER BY address"
        ).fetchall()
    assert statuses == [
        (first, "failed"),
        (second, "failed"),
        (third, "failed"),
        (later, "pending"),
    ]
    assert sorted(suppressions) == sorted(
        [
            ("u1@example.com", "hard_bounce", "sync:smtp", "all"),
            (second_address, "hard_bounce", "sync:smtp", "all"),  # widened from bulk only
        ]
    )  # and nothing for the policy refusal
    # the next mail to the address (in any case) is stopped at load
    assert suppressed_at_load(database_url, [later]) == {later: True}


def test_an_upgrade_without_roles_still_lets_the_consumer_settle(database_url: str) -> None:
    """Roles set by an older build (no suppression grant for the consumer), then `mailbus
    migrate` alone: migration 0025 grants what the settle statement now needs."""
    apply_roles(database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute("REVOKE INSERT, UPDATE ON email_suppressions FROM mailbus_consumer")
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version = 25")
    [row_id] = seed(database_url, 1)
    assert apply_migrations(database_url) == [25]
    with login_as(database_url, "mailbus_consumer") as url:
        assert _settle(url, [(row_id, USER_UNKNOWN)]) == [True]
    with psycopg.connect(database_url) as conn:
        sources = conn.execute("SELECT source FROM email_suppressions").fetchall()
    assert sources == [("sync:smtp",)]
