"""Reads what actually landed on a topic, for assertions."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError

from mailbus.schemas.codec import send_pointer_codec

__all__ = ["Landed", "read_messages", "read_pointers"]


@dataclass(frozen=True)
class Landed:
    """One record as a consumer sees it."""

    topic: str | None
    partition: int | None
    offset: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_pointers(
    bootstrap: str, topics: list[str], expect_distinct: int, timeout: float
) -> Counter[str]:
    """Count pointers per dedupe key until ``expect_distinct`` keys were seen or ``timeout``."""
    codec = send_pointer_codec()
    seen: Counter[str] = Counter()
    for landed in _read(bootstrap, topics, timeout, lambda: len(seen) >= expect_distinct):
        seen[codec.decode(landed.value)["dedupe_key"]] += 1
    return seen


def read_messages(bootstrap: str, topics: list[str], expect: int, timeout: float) -> list[Landed]:
    """Every record until ``expect`` were seen (plus any that follow shortly) or ``timeout``."""
    seen: list[Landed] = []
    for landed in _read(bootstrap, topics, timeout, lambda: len(seen) >= expect):
        seen.append(landed)
    return seen


def _read(
    bootstrap: str, topics: list[str], timeout: float, enough: Callable[[], bool]
) -> Iterator[Landed]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(topics)
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            batch = consumer.consume(5000, timeout=0.5)
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(error.str())
                    continue
                yield Landed(
                    topic=message.topic(),
                    partition=message.partition(),
                    offset=message.offset(),
                    key=message.key(),
                    value=message.value(),
                    headers=_headers(message.headers()),
                )
            if enough():
                # Keep reading briefly so republished duplicates are counted too.
                quiet_until = quiet_until or time.monotonic() + 2.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()


def _headers(
    raw: list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None,
) -> tuple[tuple[str, bytes | None], ...]:
    pairs = raw.items() if isinstance(raw, dict) else raw or ()
    return tuple(
        (name, value.encode() if isinstance(value, str) else value) for name, value in pairs
    )
