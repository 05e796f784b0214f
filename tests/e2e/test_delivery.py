"""Exactly-once delivery, proven on real processes, Kafka, PostgreSQL and the sandbox.

Each test asserts on the table and on what the sandbox received.
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Producer
from e2e_stack import Stack
from kafka_reader import read_messages
from relay_runner import wait_until

from mailbus.schemas.codec import SendPointer, send_pointer_codec


def sends_by_key(stack: Stack) -> dict[str, list[float]]:
    """Wall times of the send requests the sandbox received, per key."""
    times: dict[str, list[float]] = {}
    for record in stack.control("requests"):
        if record["kind"] == "send":
            times.setdefault(record["key"], []).append(record["t"])
    return times


def test_every_row_is_accepted_once_with_the_providers_id(stack: Stack) -> None:
    keys = stack.seed(60, priority="p1") + stack.seed(20, prefix="otp", priority="p0")
    stack.start_relay()
    stack.start_consumer()
    assert stack.wait_settled(90) == {"accepted": 80}
    ledger = stack.ledger()["keys"]
    rows = dict(stack.query("SELECT dedupe_key, message_id FROM email_sends"))
    for key in keys:
        assert ledger[key]["accepted"] == 1
        assert ledger[key]["requests"] == 1
        assert rows[key] == ledger[key]["id"]
    assert stack.terminate("consumer") == 0
    stack.assert_table_agrees_with_providers()


def test_the_same_kafka_message_twice_makes_one_request(stack: Stack) -> None:
    [key] = stack.seed(1)
    [(send_id, created_at)] = stack.query("SELECT id, created_at FROM email_sends")
    value = send_pointer_codec().encode(SendPointer.of(send_id, key, "p1", 0, created_at))
    producer = Producer({"bootstrap.servers": stack.settings.kafka_bootstrap})
    for _ in range(2):
        producer.produce(stack.settings.topic("p1"), key=key.encode(), value=value)
    producer.flush(30)
    stack.start_consumer()
    stack.wait_settled(60)
    time.sleep(2)  # give the second copy every chance to cause a second request
    assert stack.ledger()["keys"][key]["requests"] == 1
    stack.assert_table_agrees_with_providers()


def test_sigkill_after_the_provider_accepted_and_before_the_update(stack: Stack) -> None:
    stack.set_faults({"kind": "hang_after_accept", "next": 1, "hang_seconds": 60})
    [key] = stack.seed(1)
    stack.start_relay()
    stack.start_consumer(MAILBUS_REQUEST_TIMEOUT="8")  # lease = 1 + 2 * 8 + 5 s
    wait_until(
        lambda: stack.ledger()["keys"].get(key, {}).get("accepted") == 1,
        60,
        "the sandbox to accept",
    )
    assert stack.query("SELECT status FROM email_sends") == [("sending",)]
    stack.kill("consumer")  # the provider accepted; our table does not know yet
    stack.start_consumer(MAILBUS_REQUEST_TIMEOUT="1")  # short lease: resolved sooner
    stack.wait_settled(120)
    entry = stack.ledger()["keys"][key]
    assert stack.query("SELECT status, message_id FROM email_sends") == [("accepted", entry["id"])]
    assert entry["accepted"] == 1
    stack.assert_table_agrees_with_providers()


def test_accepted_then_hanging_ends_accepted_once(stack: Stack) -> None:
    stack.set_faults({"kind": "hang_after_accept", "next": 3, "hang_seconds": 30})
    keys = stack.seed(3)
    stack.start_relay()
    stack.start_consumer(MAILBUS_REQUEST_TIMEOUT="1")
    assert stack.wait_settled(60) == {"accepted": 3}
    ledger = stack.ledger()["keys"]
    rows = dict(stack.query("SELECT dedupe_key, message_id FROM email_sends"))
    assert all(ledger[k]["accepted"] == 1 and rows[k] == ledger[k]["id"] for k in keys)
    stack.assert_table_agrees_with_providers()


def test_malformed_2xx_is_resolved_by_look_up(stack: Stack) -> None:
    stack.set_faults({"kind": "malformed", "next": 1})
    [key] = stack.seed(1)
    stack.start_relay()
    stack.start_consumer()
    stack.wait_settled(60)
    entry = stack.ledger()["keys"][key]
    assert stack.query("SELECT status, message_id, attempts FROM email_sends") == [
        ("accepted", entry["id"], 1)
    ]
    assert entry["requests"] == 1
    stack.assert_table_agrees_with_providers()


def test_422_fails_after_one_attempt_with_one_dead_letter(stack: Stack) -> None:
    stack.set_faults({"kind": "422", "next": 1})
    [key] = stack.seed(1)
    stack.start_relay()
    stack.start_consumer()
    stack.wait_settled(60)
    [(status, attempts, last_error)] = stack.query(
        "SELECT status, attempts, last_error FROM email_sends"
    )
    assert (status, attempts) == ("failed", 1)
    assert "422" in last_error
    landed = read_messages(
        stack.settings.kafka_bootstrap, [stack.settings.dlq_topic], 1, timeout=30
    )
    assert len(landed) == 1
    headers = dict(landed[0].headers)
    assert headers["mailbus.dlq.reason"] == b"rejected"
    assert headers["mailbus.dlq.status_code"] == b"422"
    assert headers["mailbus.dlq.original.topic"] == stack.settings.topic("p1").encode()
    assert "mailbus.dlq.original.offset" in headers
    assert landed[0].key == key.encode()
    assert stack.ledger()["keys"][key]["requests"] == 1
    stack.assert_table_agrees_with_providers()


def test_429_retry_after_is_honoured(stack: Stack) -> None:
    stack.set_faults({"kind": "429", "next": 1, "retry_after": 3})
    [key] = stack.seed(1)
    stack.start_relay()
    stack.start_consumer()
    assert stack.wait_settled(60) == {"accepted": 1}
    first, second = sends_by_key(stack)[key]
    assert second - first >= 3.0
    stack.assert_table_agrees_with_providers()


def test_always_503_fails_after_max_attempts_with_growing_gaps(stack: Stack) -> None:
    stack.set_faults({"kind": "503", "share": 1})
    [key] = stack.seed(1)
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_MAX_ATTEMPTS="5", MAILBUS_BACKOFF_BASE="1", MAILBUS_BACKOFF_CAP="10"
    )
    stack.wait_settled(90)
    [(status, attempts, last_error)] = stack.query(
        "SELECT status, attempts, last_error FROM email_sends"
    )
    assert (status, attempts) == ("failed", 5)
    assert "gave up after 5 attempts" in last_error
    history = stack.query(
        "SELECT attempt, outcome, status_code FROM email_attempts ORDER BY attempt"
    )
    assert history == [(n, "pending", 503) for n in range(1, 5)] + [(5, "failed", 503)]
    times = sends_by_key(stack)[key]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 4
    # Equal jitter keeps each gap at least as long as the one before; allow for the
    # relay's polling and Kafka's hop, which add up to a few hundred milliseconds.
    assert all(later >= earlier - 0.5 for earlier, later in itertools.pairwise(gaps)), gaps
    assert gaps[-1] > 2 * gaps[0], gaps
    stack.assert_table_agrees_with_providers()


def test_in_flight_requests_never_exceed_the_bound(stack: Stack) -> None:
    stack.set_faults(latency_ms=100)
    stack.seed(300)
    stack.start_relay()
    stack.start_consumer(MAILBUS_MAX_IN_FLIGHT="8")
    assert stack.wait_settled(120) == {"accepted": 300}
    assert 1 < stack.ledger()["max_concurrent"] <= 8
    stack.assert_table_agrees_with_providers()


def test_a_garbage_message_goes_to_the_dlq_and_the_next_is_delivered(stack: Stack) -> None:
    producer = Producer({"bootstrap.servers": stack.settings.kafka_bootstrap})
    topic = stack.settings.topic("p1")
    producer.produce(topic, key=b"same-key", value=b"\x00not avro at all", partition=0)
    producer.flush(30)
    [key] = stack.seed(1)
    [(send_id, created_at)] = stack.query("SELECT id, created_at FROM email_sends")
    value = send_pointer_codec().encode(SendPointer.of(send_id, key, "p1", 0, created_at))
    producer.produce(topic, key=b"same-key", value=value, partition=0)  # behind the garbage
    producer.flush(30)
    stack.start_relay()
    stack.start_consumer()
    assert stack.wait_settled(60) == {"accepted": 1}
    landed = read_messages(
        stack.settings.kafka_bootstrap, [stack.settings.dlq_topic], 1, timeout=30
    )
    assert [dict(m.headers)["mailbus.dlq.reason"] for m in landed] == [b"undecodable"]
    [(original,)] = stack.query("SELECT original_value FROM email_dead_letters")
    assert bytes(original) == b"\x00not avro at all"
    stack.assert_table_agrees_with_providers()


def test_expired_and_suppressed_rows_are_never_sent(stack: Stack) -> None:
    stack.seed(2, prefix="late", expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    [blocked] = stack.seed(1, prefix="blocked")
    stack.query(
        "INSERT INTO email_suppressions (address) VALUES (%s) RETURNING address",
        f"{blocked}@example.com",
    )
    stack.start_relay()
    stack.start_consumer()
    assert stack.wait_settled(60) == {"expired": 2, "suppressed": 1}
    assert stack.ledger()["totals"]["sends"] == 0
    stack.assert_table_agrees_with_providers()


def test_sigterm_drains_in_flight_work_and_exits_zero(stack: Stack) -> None:
    stack.set_faults(latency_ms=1500)
    stack.seed(5)
    stack.start_relay()
    stack.start_consumer()
    wait_until(lambda: stack.ledger()["in_flight"] > 0, 60, "requests in flight")
    assert stack.terminate("consumer") == 0
    in_flight_rows = stack.query("SELECT count(*) FROM email_sends WHERE status = 'sending'")
    assert in_flight_rows == [(0,)]
    stack.start_consumer(name=f"again-{uuid.uuid4().hex[:4]}")
    assert stack.wait_settled(60) == {"accepted": 5}
    assert not stack.accepted_twice()
    stack.assert_table_agrees_with_providers()


def test_a_claim_that_gets_no_slot_in_time_is_handed_back_uncounted(stack: Stack) -> None:
    # One slot; the first two sends hang until the 2 s deadline, so a row claimed behind
    # one of them waits longer than its 1 s for the slot and hands its claim back.
    stack.set_faults({"kind": "hang_after_accept", "next": 2, "hang_seconds": 10})
    keys = stack.seed(4)
    stack.start_relay()
    stack.start_consumer(MAILBUS_MAX_IN_FLIGHT="1", MAILBUS_REQUEST_TIMEOUT="2")
    assert stack.wait_settled(90) == {"accepted": 4}
    handed_back = (stack.logs / "consumer.log").read_text().count("claim handed back")
    assert handed_back >= 1
    ledger = stack.ledger()["keys"]
    assert all(ledger[k]["requests"] == 1 and ledger[k]["accepted"] == 1 for k in keys)
    # Every counted attempt is a call that was made: a handed-back claim is not counted.
    assert stack.query("SELECT DISTINCT attempts FROM email_sends") == [(1,)]
    assert stack.query("SELECT count(*) FROM email_attempts") == [(4,)]
    stack.assert_table_agrees_with_providers()
