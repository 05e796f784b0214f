"""`mailbus send resolve KEY --not-sent`, run as the runbook prescribes it, on every provider
with neither an idempotency key nor a look-up (issue 35, review 2026-12-06 hole 11): the row
left ``unknown`` by a call with no known outcome is sent again on the next pass and ends
``accepted``, recorded as sent ``at_least_once`` (the operator's choice), instead of going
back to ``unknown`` for ever."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pytest
from e2e_stack import Stack
from moto_ses import CREDENTIALS, REGION, ReplySwallower, moto_ses
from relay_runner import wait_until
from services import run_mailbus
from smtp_server import smtp_server

from mailbus.providers.smtp.sending import message_id_for

SANDBOX = {
    "sendgrid": {"MAILBUS_PROVIDER": "sendgrid", "MAILBUS_MAIL_FROM": "shop@example.com"},
    "mailgun": {
        "MAILBUS_PROVIDER": "mailgun",
        "MAILBUS_MAIL_FROM": "shop@mg.example.com",
        "MAILBUS_MAILGUN_DOMAIN": "mg.example.com",
    },
}

# provider -> (the env, how many calls the provider received for the key)
Provider = tuple[dict[str, str], Callable[[], int]]


@contextmanager
def _provider(stack: Stack, kind: str, key: str) -> Iterator[Provider]:
    """The provider ``kind`` set to lose the outcome of the first call of ``key``."""
    if kind == "smtp":  # drop1-*: the connection drops after the first DATA, before a reply
        with smtp_server() as (url, server):
            env = {
                "MAILBUS_PROVIDER": "smtp",
                "MAILBUS_SMTP_URL": url,
                "MAILBUS_SMTP_FROM": "noreply@shop.example",
            }
            yield env, lambda: server.data_seen[message_id_for(key, "shop.example")]
        return
    if kind == "ses":  # SES takes the first call, its reply never comes back
        with moto_ses() as ses, ExitStack() as cleanup:
            ses.verify("shop@example.com")
            proxy = ReplySwallower(int(ses.url.rsplit(":", 1)[1]), count=1)
            cleanup.callback(proxy.close)
            yield (
                {
                    "MAILBUS_PROVIDER": "ses",
                    "MAILBUS_MAIL_FROM": "shop@example.com",
                    "MAILBUS_SES_REGION": REGION,
                    "MAILBUS_SES_ENDPOINT_URL": proxy.url,
                    "MAILBUS_SES_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
                    "MAILBUS_SES_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
                },
                lambda: len(ses.sent()),
            )
        return
    # the sandbox's dialect drops the first connection once it read the request
    stack.set_faults({"kind": "drop_before_accept", "next": 1})
    yield SANDBOX[kind], lambda: int(stack.ledger()["totals"]["sends"])  # the only mail


@pytest.mark.parametrize("kind", ["smtp", "ses", "sendgrid", "mailgun"])
def test_resolve_not_sent_sends_the_mail_again(stack: Stack, kind: str) -> None:
    [key] = stack.seed(1, prefix="drop1")
    with _provider(stack, kind, key) as (env, calls):
        stack.start_relay()
        stack.start_consumer(MAILBUS_REQUEST_TIMEOUT="1", **env)

        def row() -> tuple[str, int, str | None]:
            [found] = stack.query(
                "SELECT status, attempts, guarantee FROM email_sends WHERE dedupe_key = %s", key
            )
            return found  # type: ignore[return-value]

        wait_until(lambda: row()[0] == "unknown", 60, "the first call's outcome lost")
        assert calls() == 1
        resolved = run_mailbus(
            "send", "resolve", key, "--not-sent", env=stack.env(MAILBUS_OPERATOR="ana")
        )
        assert resolved.returncode == 0, resolved.stderr
        wait_until(lambda: row()[0] != "pending", 30, "the resolved row taken again")
        wait_until(lambda: row()[0] not in ("pending", "sending"), 30, "the resend settled")
        assert row() == ("accepted", 2, "at_least_once")  # sent again, as the operator chose
        assert calls() == 2
        assert stack.query("SELECT in_doubt_since FROM email_sends WHERE dedupe_key = %s", key) == [
            (None,)
        ]
        assert stack.terminate("consumer") == 0
