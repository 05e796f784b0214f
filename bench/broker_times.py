"""The timing method the relay and its peers share (issue 21): rows committed in a few
transactions while the relay (or Debezium) is already running, rows/s = rows ÷ (first
COMMIT → the broker's append of the last row), the append read from the topic's
LogAppendTime. bench/relay_throughput.py and bench/peers/debezium_outbox.py both time
themselves with these two functions, so their figures are comparable."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import psycopg
from confluent_kafka import Consumer

__all__ = ["APPEND_TIME", "append_times", "commit_in_transactions"]

# Topic config: a message's timestamp is the moment the broker appended it.
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def commit_in_transactions(url: str, sql: str, rows: int, transactions: int = 10) -> float:
    """Insert ``rows`` rows in ``transactions`` transactions of (about) equal size, one
    after the other on one connection; return the wall-clock time the first COMMIT
    returned. ``sql`` takes ``%(first)s`` and ``%(last)s``: the row numbers (1-based,
    inclusive) of one transaction."""
    first_commit = 0.0
    with psycopg.connect(url) as conn:
        for part in range(transactions):
            first, last = rows * part // transactions + 1, rows * (part + 1) // transactions
            conn.execute(sql, {"first": first, "last": last})
            conn.commit()
            if part == 0:
                first_commit = time.time()
    return first_commit


def append_times(
    bootstrap: str, topics: Sequence[str], expected: int, timeout: float
) -> dict[str, float]:
    """Each key's broker append time (s) on ``topics``, until ``expected`` distinct keys or
    ``timeout``; the topics must use :data:`APPEND_TIME`. A key published twice keeps its
    last append."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe(list(topics))
    appended: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(appended) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            appended[message.key().decode()] = message.timestamp()[1] / 1000
    finally:
        consumer.close()
    return appended
