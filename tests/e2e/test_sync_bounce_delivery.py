"""A synchronous "no such address" suppresses it (issue 20 item 5), on real processes: the
consumer, logged in as the least-privilege ``mailbus_consumer``, sends over SMTP to a real
server that answers ``550 5.1.1`` to RCPT; the row is ``failed`` and its address lands in
``email_suppressions`` (``hard_bounce``, ``sync:smtp``) in the same statement, as a webhook
hard bounce would put it; a later mail to that address ends ``suppressed`` and never
reaches the server."""

from __future__ import annotations

import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from smtp_server import smtp_server
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.providers.smtp.sending import message_id_for

pytestmark = pytest.mark.stack
SENDER_DOMAIN = "shop.example"


def test_a_550_5_1_1_suppresses_the_address_and_the_next_mail_is_suppressed(
    stack: Stack,
) -> None:
    apply_roles(stack.settings.database_url)
    ok = stack.seed(5, prefix="ok")
    [bad] = stack.seed(1, prefix="rcpt550")
    with (
        smtp_server() as (url, server),
        login_as(stack.settings.database_url, "mailbus_consumer") as consumer_db,
    ):
        stack.start_relay()
        stack.start_consumer(
            MAILBUS_DATABASE_URL=consumer_db,
            MAILBUS_PROVIDER="smtp",
            MAILBUS_SMTP_URL=url,
            MAILBUS_SMTP_FROM=f"noreply@{SENDER_DOMAIN}",
        )
        assert stack.wait_settled(60) == {"accepted": len(ok), "failed": 1}
        assert stack.query("SELECT address, reason, source FROM email_suppressions") == [
            (f"{bad}@example.com", "hard_bounce", "sync:smtp")
        ]
        # the next mail to that address (another business event, its case changed)
        stack.query(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('again', %s, 'welcome') RETURNING id",
            f"{bad.upper()}@EXAMPLE.COM",
        )
        wait_until(
            lambda: (
                stack.query("SELECT status FROM email_sends WHERE dedupe_key = 'again'")
                == [("suppressed",)]
            ),
            60,
            "the next mail to the bounced address suppressed",
        )
        assert stack.terminate("consumer") == 0
    assert server.data_seen[message_id_for("again", SENDER_DOMAIN)] == 0  # never sent
    # the table agrees with the provider: exactly the accepted rows reached the server, once
    accepted = stack.query("SELECT dedupe_key FROM email_sends WHERE status = 'accepted'")
    assert sorted(k for (k,) in accepted) == sorted(ok)
    assert {k: server.messages[message_id_for(k, SENDER_DOMAIN)] for k in ok} == dict.fromkeys(
        ok, 1
    )
    assert sum(server.messages.values()) == len(ok)
