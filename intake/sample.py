"""``mailbus intake publish-sample``: OrderPlaced events on the intake topic, for demos and tests.

``count`` distinct, valid orders, then ``duplicates`` of them sent again (the same event,
the same bytes), then ``malformed`` values that are not Avro at all. Keys are the order
ids, partitioned with murmur2 as Java clients and faust would, so one order's events stay
in one partition.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import KafkaException, Producer

from mailbus.kernel.errors import MailbusError
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.kernel.topics import create_topics
from mailbus.schemas.codec import order_placed_codec

__all__ = ["SampleRecord", "publish_records", "publish_sample", "sample_events"]


@dataclass(frozen=True)
class SampleRecord:
    key: bytes
    value: bytes
    order_id: str | None  # None: not a valid event


def sample_events(
    count: int, duplicates: int = 3, malformed: int = 1, run: str | None = None, seed: int = 0
) -> Iterator[SampleRecord]:
    """The records in publishing order; order ids are ``{run}-{n}``."""
    codec = order_placed_codec()
    run = run or secrets.token_hex(4)
    chosen = random.Random(seed)
    now = datetime.now(UTC)
    sent: list[SampleRecord] = []
    for number in range(count):
        order_id = f"{run}-{number}"
        record = SampleRecord(
            key=order_id.encode(),
            value=codec.encode(
                {
                    "event_id": f"evt-{order_id}",
                    "order_id": order_id,
                    "customer_email": f"customer{number}@example.com",
                    "occurred_at": now,
                    "customer_name": f"Customer {number}",
                    "total": f"{10 + number % 90}.{number % 100:02d}",
                    "currency": "EUR",
                }
            ),
            order_id=order_id,
        )
        if len(sent) < 1000:
            sent.append(record)
        yield record
    for _ in range(min(duplicates, count) if count else 0):
        yield chosen.choice(sent)
    for number in range(malformed):
        key = f"{run}-malformed-{number}".encode()
        yield SampleRecord(key=key, value=b"not avro", order_id=None)


def publish_records(
    settings: Settings, topic: str, records: Iterator[SampleRecord], timeout: float = 60.0
) -> int:
    """Publish and wait for every acknowledgement; return how many were published."""
    producer = Producer(
        {
            **kafka_client_config(settings),
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10000,
        }
    )
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    published = 0
    try:
        for record in records:
            while True:
                try:
                    producer.produce(
                        topic, key=record.key, value=record.value, on_delivery=delivered
                    )
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
            published += 1
            producer.poll(0)
    except KafkaException as exc:
        raise MailbusError(f"cannot publish to {topic}: {exc}") from None
    if producer.flush(timeout) or failures:
        reason = failures[0] if failures else "not all acknowledged in time"
        raise MailbusError(f"cannot publish to {topic}: {reason}")
    return published


def publish_sample(
    settings: Settings, topic: str, count: int, duplicates: int = 3, malformed: int = 1
) -> int:
    create_topics(settings, [topic])
    run = secrets.token_hex(4)
    published = publish_records(settings, topic, sample_events(count, duplicates, malformed, run))
    valid = published - malformed
    print(
        f"published {published} events to {topic}: {count} orders ({run}-0 .. {run}-{count - 1}),"
        f" {valid - count} duplicates, {malformed} malformed; expect {count} rows"
    )
    return 0
