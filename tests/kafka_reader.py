"""Reads what actually landed on a topic, for assertions."""

from __future__ import annotations

import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, KafkaError

from schemas.codec import send_pointer_codec

__all__ = ["read_pointers"]


def read_pointers(
    bootstrap: str, topics: list[str], expect_distinct: int, timeout: float
) -> Counter[str]:
    """Count pointers per dedupe key until ``expect_distinct`` keys were seen or ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    codec = send_pointer_codec()
    seen: Counter[str] = Counter()
    try:
        consumer.subscribe(topics)
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            batch = consumer.consume(5000, timeout=0.5)
            for message in batch:
                if message.error():
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(message.error().str())
                    continue
                seen[codec.decode(message.value())["dedupe_key"]] += 1
            if len(seen) >= expect_distinct:
                # Keep reading briefly so republished duplicates are counted too.
                quiet_until = quiet_until or time.monotonic() + 2.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return seen
