"""The SMTP server's own trouble is the provider's state, on real processes: relay and
consumer against a real SMTP server (aiosmtpd) that first refuses AUTH (a rotated
password), then greets with ``421 4.7.0 too many connections``. No mail is failed, no
recipient domain is throttled, no attempt is spent; the breaker opens and closes once the
server is back; every mail is then accepted once, and the table agrees with the server.
And ``smtp://user@host`` (AUTH without TLS) is refused at start unless allowed."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from services import REPO
from smtp_server import SmtpRecorder, free_port, smtp_server

from mailbus.providers.smtp.sending import message_id_for

SENDER_DOMAIN = "shop.example"
PASSWORD = "s3cret"
DOMAINS = ("a.example", "b.example", "c.example")


@pytest.fixture
def smtp() -> Iterator[tuple[str, SmtpRecorder]]:
    with smtp_server(password=PASSWORD) as running:
        yield running


def _seed(stack: Stack, count: int, prefix: str) -> list[str]:
    keys = [f"{prefix}-{n}" for n in range(count)]
    with psycopg.connect(stack.settings.database_url) as conn:
        conn.cursor().executemany(
            "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES (%s, %s, 'welcome')",
            [(key, f"{key}@{DOMAINS[n % len(DOMAINS)]}") for n, key in enumerate(keys)],
        )
    return keys


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return sum(float(value) for value in values)


def _no_mail_blamed(stack: Stack, port: int, keys: list[str]) -> None:
    """Nothing failed or dead-lettered, no attempt spent (a call in flight aside), no
    recipient domain deferred."""
    assert stack.statuses()["failed"] == 0
    assert stack.query("SELECT count(*) FROM email_dead_letters") == [(0,)]
    spent = stack.query(
        "SELECT dedupe_key, status, attempts FROM email_sends"
        " WHERE dedupe_key = ANY(%s) AND attempts > 0 AND status <> 'sending'",
        keys,
    )
    assert spent == []
    assert _metric(port, "mailbus_domain_deferrals_total") == 0


def test_a_rotated_password_and_a_refusing_greeting_are_the_servers_state(
    stack: Stack, smtp: tuple[str, SmtpRecorder]
) -> None:
    url, server = smtp
    server.password = "rotated"  # the server no longer takes the consumer's password
    port = free_port()
    first = _seed(stack, 12, "auth")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER="smtp",
        MAILBUS_SMTP_URL=url.replace("smtp://", "smtp://mailer@"),
        MAILBUS_SMTP_PASSWORD=PASSWORD,
        MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH="true",  # a local test server without TLS
        MAILBUS_SMTP_FROM=f"noreply@{SENDER_DOMAIN}",
        MAILBUS_METRICS_PORT=str(port),
        MAILBUS_RECOVERY_RATE="off",
    )

    def breaker(state: int) -> bool:
        return _metric(port, "mailbus_breaker_state") == state

    wait_until(lambda: server.refused["auth"] >= 5 and breaker(2), 60, "the breaker open on 535")
    _no_mail_blamed(stack, port, first)
    failures = 'mailbus_provider_server_failures_total{provider="smtp",stage="auth"}'
    assert _metric(port, failures) >= 5
    server.password = PASSWORD  # the server takes it again
    stack.wait_settled(60)
    wait_until(lambda: breaker(0), 10, "the breaker closed")

    server.greeting = "421 4.7.0 too many connections"
    server.drop_connections()  # a restart: kept connections meet the new greeting too
    second = _seed(stack, 12, "greeting")
    wait_until(
        lambda: server.refused["greeting"] >= 5 and breaker(2), 60, "the breaker open on 421"
    )
    _no_mail_blamed(stack, port, second)
    server.greeting = None
    assert stack.wait_settled(60) == {"accepted": len(first) + len(second)}
    wait_until(lambda: breaker(0), 10, "the breaker closed")

    # every mail accepted once, on its first counted attempt, with its one history row;
    # the table agrees with the server's ledger
    rows = stack.query("SELECT dedupe_key, status, message_id, attempts FROM email_sends")
    assert {(status, attempts) for _, status, _, attempts in rows} == {("accepted", 1)}
    assert stack.query("SELECT count(*) FROM email_attempts") == [(len(rows),)]
    for key, _, message_id, _ in rows:
        assert server.messages[message_id_for(key, SENDER_DOMAIN)] == 1, key
        assert message_id.startswith("Q")
    assert sum(server.messages.values()) == len(rows)
    assert stack.terminate("consumer") == 0


def test_auth_without_tls_is_refused_at_start(stack: Stack) -> None:
    env = stack.env(
        MAILBUS_PROVIDER="smtp",
        MAILBUS_SMTP_URL=f"smtp://mailer@127.0.0.1:{free_port()}",
        MAILBUS_SMTP_PASSWORD=PASSWORD,
        MAILBUS_SMTP_FROM=f"noreply@{SENDER_DOMAIN}",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mailbus", "consume", "--priority", "p1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "MAILBUS_SMTP_URL" in line and "MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH" in line
    assert PASSWORD not in done.stderr + done.stdout
