"""`mailbus consume` and `mailbus webhooks` through a real transaction-pooling PgBouncer
(docs/guides/pgbouncer.md): the consumer loads, claims and settles every row through the
pooler, the receiver applies every delivery event through it, and the table agrees with
the provider. The relay, which needs a session of its own (LISTEN), reaches PostgreSQL
directly, as the guide says."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_stack import API_KEY, Stack
from pgbouncer import PgBouncer
from relay_runner import wait_until

from mailbus.kernel.settings import Settings
from mailbus.sandbox.emitter import EventEmitter
from mailbus.sandbox.outcomes import OutcomePlan
from mailbus.sandbox.server import start_in_thread

MAILS = 240  # enough that every statement runs far more than 5 times on each connection
SECRET = "whsec_e2e_pgbouncer_0123456789"
POOLED = {"MAILBUS_DATABASE_TRANSACTION_POOLING": "true"}
# what the consumer and the receiver log when a statement fails (and they try again)
STATEMENT_ERRORS = ("database unavailable", "not recorded", "prepared statement")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def events_stack(settings: Settings, tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """The e2e stack whose sandbox posts signed delivery events (some bounces and
    complaints) to `mailbus webhooks` at the address given with it."""
    listen = f"127.0.0.1:{free_port()}"
    plan = OutcomePlan(delay_ms=100, bounce_share=0.2, complaint_share=0.1)
    emitter = EventEmitter(f"http://{listen}/webhooks/sandbox", SECRET, plan, seed=7)
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1, emitter=emitter)
    stack = Stack(settings, sandbox, tmp_path)
    try:
        yield stack, listen
    finally:
        stack.stop_all()
        sandbox.stop()


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def seed(stack: Stack) -> None:
    stack.seed(MAILS - 40, priority="p1")
    stack.seed(40, prefix="otp", priority="p0")


def events_applied(stack: Stack) -> bool:
    """Every event the sandbox meant to send was sent and applied to its row."""
    left = stack.query(
        "SELECT (SELECT count(*) FROM delivery_events WHERE NOT matched)"
        " + (SELECT count(*) FROM email_sends WHERE delivery_status IS NULL)"
    )
    return bool(stack.control("events")["pending"] == 0 and left == [(0,)])


def statement_errors(stack: Stack, name: str) -> list[str]:
    lines = (stack.logs / f"{name}.log").read_text(errors="replace").splitlines()
    return [line for line in lines if any(error in line for error in STATEMENT_ERRORS)]


def test_the_consumer_and_the_receiver_work_through_transaction_pooling(
    events_stack: tuple[Stack, str], pgbouncer: PgBouncer
) -> None:
    stack, listen = events_stack
    seed(stack)
    consumer_port, webhooks_port = free_port(), free_port()
    through = {"MAILBUS_DATABASE_URL": pgbouncer.url, **POOLED}
    stack.start(
        "webhooks",
        "webhooks",
        MAILBUS_WEBHOOK_SECRET=SECRET,
        MAILBUS_WEBHOOK_LISTEN=listen,
        MAILBUS_METRICS_PORT=str(webhooks_port),
        **through,
    )
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_RATE_LIMIT="2000",  # the global limiter's connection goes through it too
        MAILBUS_METRICS_PORT=str(consumer_port),
        **through,
    )
    assert stack.wait_settled(120) == {"accepted": MAILS}
    wait_until(lambda: events_applied(stack), 120, "every delivery event applied")
    for port in (consumer_port, webhooks_port):  # their database round trip included
        wait_until(lambda port=port: ready(port), 30, f"/readyz on {port} through PgBouncer")
    assert stack.terminate("consumer") == 0
    assert stack.terminate("webhooks") == 0
    stack.assert_table_agrees_with_providers()
    assert stack.query("SELECT count(*) FROM email_suppressions") != [(0,)]  # bounces
    assert statement_errors(stack, "consumer") == []
    assert statement_errors(stack, "webhooks") == []
    assert "login attempt: db=" in pgbouncer.logged()  # they did come through the pooler


def test_without_the_setting_the_consumer_fails_through_transaction_pooling(
    stack: Stack, pgbouncer: PgBouncer
) -> None:
    """What MAILBUS_DATABASE_TRANSACTION_POOLING prevents: psycopg prepares the consumer's
    statements after five executions, and the pooler runs a later one in a server session
    that has another statement, or none, under that name. The consumer takes the error for
    a database outage and tries again, so mail still goes out here, slower; a statement
    that met another one of the same name and as many parameters could run that one."""
    seed(stack)
    stack.start_relay()
    stack.start_consumer(MAILBUS_DATABASE_URL=pgbouncer.url)
    wait_until(lambda: bool(statement_errors(stack, "consumer")), 120, "a statement error")
    assert "prepared statement" in statement_errors(stack, "consumer")[0]
    # Its graceful stop waits out settles the pooler keeps failing (16 s here): not what is
    # tested, so it is killed rather than left to the teardown's SIGTERM.
    stack.kill("consumer")
