"""A least-privilege deployment end to end: every Kafka client over TLS (SASL_SSL with a
SCRAM user, or the TLS-only listener), PostgreSQL over verify-full TLS, and each process
logged in as a member of its group role from `mailbus migrate --roles`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from transport_security import StackSecurity, login_as, stack_security

from mailbus.app.migrate import apply_roles
from mailbus.intake.sample import SampleRecord, publish_records
from mailbus.kernel.topics import create_topics
from mailbus.schemas.codec import order_placed_codec

pytestmark = pytest.mark.stack


@pytest.fixture
def security(stack: Stack) -> Iterator[StackSecurity]:
    apply_roles(stack.settings.database_url)
    yield stack_security()


def test_rows_are_delivered_over_sasl_ssl_by_least_privilege_roles(
    stack: Stack, security: StackSecurity
) -> None:
    keys = stack.seed(15, priority="p1") + stack.seed(5, prefix="otp", priority="p0")
    with (
        login_as(stack.settings.database_url, "mailbus_relay") as relay_db,
        login_as(stack.settings.database_url, "mailbus_consumer") as consumer_db,
    ):
        kafka = security.sasl_env("SCRAM-SHA-512")
        stack.start_relay(MAILBUS_DATABASE_URL=security.verify_full(relay_db), **kafka)
        stack.start_consumer(MAILBUS_DATABASE_URL=security.verify_full(consumer_db), **kafka)
        assert stack.wait_settled(120) == {"accepted": len(keys)}
        assert stack.terminate("consumer") == 0
        assert stack.terminate("relay") == 0
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()


def test_rows_are_delivered_over_the_tls_listener(stack: Stack, security: StackSecurity) -> None:
    keys = stack.seed(10, priority="p1")
    stack.start_relay(**security.ssl_env())
    stack.start_consumer(priorities="p1", **security.ssl_env())
    assert stack.wait_settled(120) == {"accepted": len(keys)}
    stack.assert_table_agrees_with_providers()


def test_intake_reads_over_sasl_ssl_as_the_intake_role(
    stack: Stack, security: StackSecurity
) -> None:
    settings = stack.settings
    topic = f"{settings.topic_prefix}.orders.events"
    create_topics(settings, [topic])
    codec = order_placed_codec()
    records = [
        SampleRecord(
            key=order.encode(),
            value=codec.encode(
                {
                    "event_id": f"evt-{order}",
                    "order_id": order,
                    "customer_email": f"buyer-{order}@example.com",
                    "occurred_at": int(time.time() * 1000),  # older than 3 days: not mailed
                }
            ),
            order_id=order,
        )
        for order in ("A", "B", "C")
    ]
    assert publish_records(settings, topic, iter(records)) == 3
    with login_as(settings.database_url, "mailbus_intake") as intake_db:
        stack.start(
            "intake",
            "intake",
            MAILBUS_INTAKE_TOPIC=topic,
            MAILBUS_INTAKE_SESSION_TIMEOUT="6",
            MAILBUS_DATABASE_URL=security.verify_full(intake_db),
            **security.sasl_env("SCRAM-SHA-256"),
        )
        wait_until(lambda: len(stack.query("SELECT 1 FROM email_sends")) == 3, 90, "three rows")
        assert stack.terminate("intake") == 0
    rows = stack.query("SELECT dedupe_key FROM email_sends ORDER BY 1")
    assert rows == [(f"order-{order}-confirmation",) for order in ("A", "B", "C")]
