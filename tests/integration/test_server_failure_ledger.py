"""A call the provider's server failed (SMTP greeting, AUTH, MAIL) hands its attempt back
in the ledger, on the real PostgreSQL and as the least-privilege consumer role."""

from __future__ import annotations

from dataclasses import replace

import psycopg
from ledger_support import ORIGIN, claim, rows, seed, with_ledger
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.core import RetryPolicy, Status, after_call
from mailbus.consumer.core.smtp_outcome import SmtpReply, classify_smtp
from mailbus.consumer.ledger import SendLedger


def test_a_server_failure_hands_the_attempt_back_and_writes_no_history(
    database_url: str,
) -> None:
    apply_roles(database_url)
    [row_id] = seed(database_url, 1)
    refused = classify_smtp(SmtpReply(535, "5.7.8 credentials invalid", "auth"))
    accepted = classify_smtp(SmtpReply(250, "2.0.0 Ok: queued as Q00001", "end", "<m@x>"))

    async def scenario(ledger: SendLedger) -> list[bool]:
        settled = []
        for result in (refused, refused, accepted):
            loaded = await ledger.load(row_id)
            assert loaded is not None and loaded.view.attempts == 0  # never spent
            token = await claim(ledger, row_id, 0, None)
            assert token is not None
            row = replace(loaded.view, status=Status.SENDING, attempts=1)
            now = ledger.clock.now()
            decision = after_call(row, result, now, RetryPolicy(base_s=0.001), lambda: 0.0)
            decision = replace(decision, retry_at=None)  # due at once for the next round
            settled.append(await ledger.settle_call(row, token, decision, ORIGIN, 5))
        return settled

    with login_as(database_url, "mailbus_consumer") as url:
        assert with_ledger(url, scenario) == [True, True, True]
    assert rows(database_url)[row_id] == ("accepted", 1, "Q00001")
    with psycopg.connect(database_url) as conn:
        history = conn.execute("SELECT attempt, provider_code FROM email_attempts").fetchall()
        dead = conn.execute("SELECT count(*) FROM email_dead_letters").fetchone()
    assert history == [(1, "250 2.0.0")]  # the refused AUTHs were not mail attempts
    assert dead == (0,)


def test_a_refusal_past_the_max_age_fails_the_mail_with_a_max_age_dead_letter(
    database_url: str,
) -> None:
    """MAILBUS_MAX_AGE ends a mail our account holds: the refused call still spends no
    attempt and leaves no history, and the mail is failed with dead letter ``max_age``."""
    apply_roles(database_url)
    [row_id] = seed(database_url, 1)
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET created_at = now() - interval '2 days'")
    refused = classify_smtp(SmtpReply(535, "5.7.8 credentials invalid", "auth"))
    policy = RetryPolicy(base_s=1.0, max_age_s=86_400.0)

    async def scenario(ledger: SendLedger) -> bool:
        loaded = await ledger.load(row_id)
        assert loaded is not None
        token = await claim(ledger, row_id, 0, None)  # a first try: no maximum age yet
        assert token is not None
        row = replace(loaded.view, status=Status.SENDING, attempts=1)
        decision = after_call(row, refused, ledger.clock.now(), policy, lambda: 0.0)
        return await ledger.settle_call(row, token, decision, ORIGIN, 5)

    with login_as(database_url, "mailbus_consumer") as url:
        assert with_ledger(url, scenario) is True
    assert rows(database_url)[row_id] == ("failed", 0, None)
    with psycopg.connect(database_url) as conn:
        history = conn.execute("SELECT count(*) FROM email_attempts").fetchone()
        dead = conn.execute("SELECT reason FROM email_dead_letters").fetchall()
    assert history == (0,) and dead == [("max_age",)]
