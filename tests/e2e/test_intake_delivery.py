"""Domain events all the way: OrderPlaced on Kafka → intake → row → relay → consumer → sandbox.

The same event three times, a second event for one order, events out of order and a
malformed one: one row and one accepted mail per order, the malformed event in the
intake DLQ, and the sandbox accepted no key twice.
"""

from __future__ import annotations

import time

import pytest
from e2e_stack import Stack
from relay_runner import wait_until

from mailbus.intake.sample import SampleRecord, publish_records
from mailbus.kernel.topics import create_topics
from mailbus.schemas.codec import order_placed_codec

pytestmark = pytest.mark.stack


def _event(order_id: str, event_id: str, age_days: int = 0) -> SampleRecord:
    value = order_placed_codec().encode(
        {
            "event_id": event_id,
            "order_id": order_id,
            "customer_email": f"buyer-{order_id}@example.com",
            "occurred_at": int((time.time() - age_days * 86400) * 1000),
        }
    )
    return SampleRecord(key=order_id.encode(), value=value, order_id=order_id)


def test_order_placed_events_become_one_mail_per_order(stack: Stack) -> None:
    settings = stack.settings
    topic = f"{settings.topic_prefix}.orders.events"
    create_topics(settings, [topic])
    a, b, c = (_event(order, f"evt-{order}") for order in ("A", "B", "C"))
    malformed = SampleRecord(key=b"M", value=b"\x00 not avro", order_id=None)
    old = _event("OLD", "evt-OLD", age_days=30)  # past MAILBUS_INTAKE_MAX_AGE: never mailed
    records = [a, a, c, a, malformed, old, b, _event("A", "evt-A-again"), c]
    assert publish_records(settings, topic, iter(records)) == len(records)
    env = {"MAILBUS_INTAKE_TOPIC": topic, "MAILBUS_INTAKE_SESSION_TIMEOUT": "6"}
    stack.start("intake", "intake", **env)
    stack.start_relay()
    stack.start_consumer(priorities="p1")

    keys = [f"order-{order}-confirmation" for order in ("A", "B", "C")]
    wait_until(lambda: len(stack.query("SELECT 1 FROM email_sends")) == 4, 90, "four rows")
    assert stack.wait_settled(90) == {"accepted": 3, "expired": 1}
    wait_until(
        lambda: len(stack.query("SELECT 1 FROM email_dead_letters")) == 1, 30, "the dead letter"
    )
    assert stack.terminate("intake") == 0

    ledger = stack.ledger()["keys"]
    assert sorted(ledger) == keys
    assert all(entry["accepted"] == 1 for entry in ledger.values())
    assert stack.accepted_twice() == []
    rows = stack.query(
        "SELECT dedupe_key, template, priority FROM email_sends"
        " WHERE status = 'accepted' ORDER BY 1"
    )
    assert rows == [(key, "order_confirmation", "p1") for key in keys]
    ((reason, original_key),) = stack.query("SELECT reason, original_key FROM email_dead_letters")
    assert (reason, bytes(original_key)) == ("intake_undecodable", b"M")
    stack.assert_table_agrees_with_providers()
