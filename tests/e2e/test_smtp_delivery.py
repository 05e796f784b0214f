"""Delivery over SMTP, on real processes: relay + consumer with MAILBUS_PROVIDER=smtp against
a real SMTP server (aiosmtpd) that accepts, answers 451 once, 550 5.1.1, or drops the
connection after DATA."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from smtp_server import SmtpRecorder, smtp_server

from mailbus.providers.smtp.sending import message_id_for

SENDER_DOMAIN = "shop.example"


@pytest.fixture
def smtp() -> Iterator[tuple[str, SmtpRecorder]]:
    with smtp_server() as running:
        yield running


def test_smtp_rows_are_accepted_once_rejected_with_codes_and_unknown_never_resent(
    stack: Stack, smtp: tuple[str, SmtpRecorder]
) -> None:
    url, server = smtp
    ok = stack.seed(40, prefix="ok") + stack.seed(10, prefix="otp", priority="p0")
    [rejected] = stack.seed(1, prefix="rcpt550")
    [later] = stack.seed(1, prefix="data451")
    [dropped] = stack.seed(1, prefix="drop")
    [never] = stack.seed(1, prefix="always451")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER="smtp",
        MAILBUS_SMTP_URL=url,
        MAILBUS_SMTP_FROM=f"noreply@{SENDER_DOMAIN}",
        MAILBUS_RETRY_SCHEDULE="1s,1s",
    )

    def status(key: str) -> str:
        return str(stack.query("SELECT status FROM email_sends WHERE dedupe_key = %s", key)[0][0])

    def done() -> bool:
        counts = stack.statuses()
        return (
            counts["accepted"] == len(ok) + 1
            and counts["failed"] == 2
            and (status(dropped) == "unknown")
        )

    wait_until(done, 90, "every row in its final state, the dropped one unknown")
    rows = {
        key: (message_id, provider_code, attempts)
        for key, message_id, provider_code, attempts in stack.query(
            "SELECT dedupe_key, message_id, provider_code, attempts FROM email_sends"
        )
    }
    for key in [*ok, later]:
        ours = message_id_for(key, SENDER_DOMAIN)
        assert server.messages[ours] == 1, key  # accepted exactly once per Message-ID
        message_id, code, _ = rows[key]
        assert message_id.startswith("Q") and code == "250 2.0.0"
    assert sum(server.messages.values()) == len(ok) + 1

    assert rows[rejected][1:] == ("550 5.1.1", 1)
    assert stack.query(
        "SELECT a.provider_code, d.reason FROM email_attempts a"
        " JOIN email_dead_letters d USING (send_id) JOIN email_sends s ON s.id = a.send_id"
        " WHERE s.dedupe_key = %s",
        rejected,
    ) == [("550 5.1.1", "rejected")]

    assert rows[later][2] == 2  # 451 once, then accepted on the schedule
    assert [
        code
        for (code,) in stack.query(
            "SELECT a.provider_code FROM email_attempts a JOIN email_sends s ON s.id = a.send_id"
            " WHERE s.dedupe_key = %s ORDER BY a.attempt",
            later,
        )
    ] == ["451 4.3.0", "250 2.0.0"]

    # 451 on every try: failed after the schedule's last retry (1 + 2 calls), with no
    # look-up needed (never in doubt), so not left unknown for want of one
    assert rows[never][1:] == ("451 4.3.0", 3)
    assert server.data_seen[message_id_for(never, SENDER_DOMAIN)] == 3
    assert stack.query(
        "SELECT d.reason FROM email_dead_letters d JOIN email_sends s ON s.id = d.send_id"
        " WHERE s.dedupe_key = %s",
        never,
    ) == [("max_attempts",)]

    time.sleep(6)  # the reconciler looks the dropped row up meanwhile: it is never resent
    [(state, attempts, error)] = stack.query(
        "SELECT status, attempts, last_error FROM email_sends WHERE dedupe_key = %s", dropped
    )
    assert (state, attempts) == ("unknown", 1)
    assert "no look-up at this provider" in error  # SMTP: neither key nor look-up
    assert server.data_seen[message_id_for(dropped, SENDER_DOMAIN)] == 1
    assert stack.terminate("consumer") == 0


def test_at_least_once_resends_what_was_lost_after_data(
    stack: Stack, smtp: tuple[str, SmtpRecorder]
) -> None:
    url, server = smtp
    [dropped] = stack.seed(1, prefix="drop")  # the server drops every try after DATA
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER="smtp",
        MAILBUS_SMTP_URL=url,
        MAILBUS_SMTP_FROM=f"noreply@{SENDER_DOMAIN}",
        MAILBUS_RETRY_SCHEDULE="1s,1s",
        MAILBUS_SMTP_UNKNOWN="at_least_once",
    )
    assert stack.wait_settled(60) == {"failed": 1}
    [(attempts,)] = stack.query("SELECT attempts FROM email_sends")
    assert attempts == 3
    assert server.data_seen[message_id_for(dropped, SENDER_DOMAIN)] == 3  # resent, same id
    assert stack.terminate("consumer") == 0
