"""Suppressions scoped by reason, end to end: `mailbus webhooks` takes a real unsubscribe
and a real signed hard bounce, relay and consumer deliver what follows. An unsubscribe
stops bulk mail (a newsletter, a campaign's row) and never a password reset or an order;
a hard bounce stops everything, even after an unsubscribe came first."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from services import run_mailbus

from mailbus.campaigns.unsubscribe import make_token
from mailbus.feedback.signature import signature_header

WEBHOOK_SECRET = "whsec_e2e_scope_0123456789"
UNSUBSCRIBE_SECRET = "unsub_e2e_scope_0123456789abcdef"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def receiver(stack: Stack) -> Iterator[str]:
    """`mailbus webhooks` with unsubscribe links on; its base URL."""
    listen = f"127.0.0.1:{free_port()}"
    stack.start(
        "webhooks",
        "webhooks",
        MAILBUS_WEBHOOK_SECRET=WEBHOOK_SECRET,
        MAILBUS_WEBHOOK_LISTEN=listen,
        MAILBUS_UNSUBSCRIBE_SECRET=UNSUBSCRIBE_SECRET,
    )
    log = stack.logs / "webhooks.log"
    wait_until(lambda: "listening on" in log.read_text(), 30, "the receiver listening")
    yield f"http://{listen}"


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return int(reply.status)


def unsubscribe(base: str, address: str) -> None:
    token = make_token(UNSUBSCRIBE_SECRET, address, 1, int(time.time()))
    one_click = {"Content-Type": "application/x-www-form-urlencoded"}
    assert post(f"{base}/unsubscribe/{token}", b"List-Unsubscribe=One-Click", one_click) == 200


def hard_bounce(base: str, message_id: str) -> None:
    path = "/webhooks/sandbox"
    body = json.dumps(
        {
            "id": f"evt-{message_id}",
            "type": "bounced",
            "bounce": "hard",
            "message_id": message_id,
            "occurred_at": datetime.now(UTC).isoformat(),
        }
    ).encode()
    signed = signature_header(WEBHOOK_SECRET, path, body, int(time.time()))
    assert post(base + path, body, {"Mailbus-Signature": signed}) == 200


def seed(
    stack: Stack, key: str, to: str, template: str, priority: str, campaign: int | None
) -> None:
    stack.query(
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority, campaign_id)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
        key, to, template, priority, campaign,
    )  # fmt: skip


def test_an_unsubscribe_stops_bulk_mail_only_and_a_hard_bounce_everything(
    stack: Stack, receiver: str
) -> None:
    stack.start_relay()
    stack.start_consumer()
    # Bo got a mail; later he unsubscribes, then that mail bounces hard.
    seed(stack, "welcome-bo", "bo@example.com", "welcome", "p1", None)
    stack.wait_settled(60)
    [(message_id,)] = stack.query("SELECT message_id FROM email_sends")
    unsubscribe(receiver, "Ana@Example.com")
    unsubscribe(receiver, "bo@example.com")
    hard_bounce(receiver, message_id)

    mails = {  # key: (to, template, priority, campaign)
        "reset-ana": ("ANA@example.com", "password_reset", "p0", None),
        "order-ana": ("ana@example.com", "order_confirmation", "p1", None),
        "news-ana": ("ana@example.com", "newsletter", "p2", None),
        "spring-ana": ("ana@example.com", "spring_sale", "p2", 1),  # a campaign's row
        "reset-bo": ("bo@example.com", "password_reset", "p0", None),
        "news-bo": ("bo@example.com", "newsletter", "p2", None),
    }
    for key, (to, template, priority, campaign) in mails.items():
        seed(stack, key, to, template, priority, campaign)
    stack.wait_settled(60)

    assert dict(stack.query("SELECT dedupe_key, status FROM email_sends")) == {
        "welcome-bo": "accepted",
        "reset-ana": "accepted",
        "order-ana": "accepted",
        "news-ana": "suppressed",
        "spring-ana": "suppressed",
        "reset-bo": "suppressed",
        "news-bo": "suppressed",
    }
    listed = run_mailbus("suppress", "list", "--json", env=stack.env())
    assert listed.returncode == 0, listed.stderr
    assert [(e["address"], e["reason"], e["scope"]) for e in json.loads(listed.stdout)] == [
        ("ana@example.com", "unsubscribed", "bulk"),
        ("bo@example.com", "hard_bounce", "all"),
    ]
    stack.assert_table_agrees_with_providers()
