"""Outcome events end to end: relay, consumer and `mailbus webhooks` as processes, the
sandbox rejecting some mail for good and emitting signed delivery events for what it
accepted; every change of every send appears on `{prefix}.send.events` once, in order."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from e2e_stack import API_KEY, Stack
from kafka_reader import read_messages
from relay_runner import wait_until
from services import run_mailbus

from mailbus.kernel.settings import Settings
from mailbus.sandbox.emitter import EventEmitter
from mailbus.sandbox.outcomes import OutcomePlan
from mailbus.sandbox.server import start_in_thread
from mailbus.schemas.codec import send_event_codec
from mailbus.schemas.send_event import SendEvent

SECRET = "whsec_e2e_send_events_0123456789"
PLAN = OutcomePlan(delay_ms=300, bounce_share=0.25, hard_share=0.5, complaint_share=0.3)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def loop_stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    """The e2e stack, its sandbox posting signed delivery events to `mailbus webhooks`."""
    listen = f"127.0.0.1:{free_port()}"
    emitter = EventEmitter(f"http://{listen}/webhooks/sandbox", SECRET, PLAN, seed=5)
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1, emitter=emitter)
    stack = Stack(settings, sandbox, tmp_path)
    try:
        stack.start(
            "webhooks", "webhooks", MAILBUS_WEBHOOK_SECRET=SECRET, MAILBUS_WEBHOOK_LISTEN=listen
        )
        log = tmp_path / "webhooks.log"
        wait_until(lambda: "listening on" in log.read_text(), 30, "the receiver listening")
        yield stack
    finally:
        stack.stop_all()
        sandbox.stop()


def delivery_settled(stack: Stack) -> bool:
    """Every event the sandbox meant to send was sent and applied to its row."""
    counts = stack.control("events")
    left = stack.query(
        "SELECT (SELECT count(*) FROM delivery_events WHERE NOT matched)"
        " + (SELECT count(*) FROM email_sends"
        "    WHERE status = 'accepted' AND delivery_status IS NULL)"
    )
    return counts["pending"] == 0 and left == [(0,)]


def expected_changes(stack: Stack, replayed: set[str]) -> dict[str, list[str]]:
    """Each send's changes, from what the sandbox and the receiver say rather than from the
    events table: its final status (a replayed one failed first), then the delivery events
    of its message in the order they happened, repeats left out."""
    deliveries: dict[str, list[str]] = defaultdict(list)
    for message_id, kind in stack.query(
        "SELECT message_id, type FROM delivery_events ORDER BY occurred_at, event_id"
    ):
        if not deliveries[message_id] or deliveries[message_id][-1] != kind:
            deliveries[message_id].append(kind)
    expected = {}
    for key, status, message_id in stack.query(
        "SELECT dedupe_key, status, message_id FROM email_sends"
    ):
        first = ["failed"] if key in replayed else []
        expected[key] = [*first, status, *deliveries.get(message_id, [])]
    return expected


def test_every_change_of_every_send_is_on_the_events_topic_once_in_order(
    loop_stack: Stack,
) -> None:
    stack = loop_stack
    stack.set_faults({"kind": "422", "share": 0.3})  # rejected for good: failed
    keys = stack.seed(60, prefix="inv", template="invoice")
    stack.seed(4, prefix="late", expires_at="2000-01-01T00:00:00Z")  # ends expired
    with psycopg.connect(stack.settings.database_url) as conn:
        conn.execute(
            "INSERT INTO email_suppressions (address) VALUES ('inv-1@example.com'),"
            " ('INV-2@example.com')"  # ends suppressed, case-insensitively
        )
    stack.start_relay()
    stack.start_consumer()
    first = stack.wait_settled(60)
    assert first["failed"] > 0 and first["expired"] == 4 and first["suppressed"] == 2
    failed = {
        key for (key,) in stack.query("SELECT dedupe_key FROM email_sends WHERE status = 'failed'")
    }

    stack.set_faults()  # the provider accepts everything now: the failed are replayed
    replay = run_mailbus("dlq", "replay", "--why", "events e2e", env=stack.env())
    assert replay.returncode == 0, replay.stderr
    time.sleep(0.5)
    settled = stack.wait_settled(60)
    assert settled == {"accepted": len(keys) - 2, "expired": 4, "suppressed": 2}
    wait_until(lambda: delivery_settled(stack), 60, "every delivery event applied")
    wait_until(
        lambda: (
            stack.query("SELECT count(*) FROM email_send_events WHERE published_at IS NULL")
            == [(0,)]
        ),
        60,
        "every outcome event published",
    )

    expected = expected_changes(stack, failed)
    total = sum(len(changes) for changes in expected.values())
    landed = read_messages(
        stack.settings.kafka_bootstrap, [stack.settings.events_topic], total, timeout=60
    )
    codec = send_event_codec()
    events = [SendEvent.from_record(codec.decode(message.value)) for message in landed]
    seen: dict[str, list[str]] = defaultdict(list)
    for event in events:
        seen[event.dedupe_key].append(event.event)
    differing = {  # (on the topic, expected) of each send whose changes differ
        key: (seen.get(key, []), changes)
        for key, changes in expected.items()
        if seen.get(key, []) != changes
    }
    assert len(events) == total, differing
    assert len({e.event_id for e in events}) == total  # each once
    assert dict(seen) == expected  # every change, in the order of the changes, per send
    kinds = {kind for changes in expected.values() for kind in changes}
    assert {"accepted", "failed", "expired", "suppressed", "delivered", "bounced"} <= kinds
    assert "complained" in kinds
    stack.assert_table_agrees_with_providers()
