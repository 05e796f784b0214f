"""One relay pass over one outbox table: claim, publish, un-claim what failed, commit.

Every table the relay drains (``email_sends`` for send pointers, ``email_dead_letters``
for the DLQ, ``email_send_events`` for outcome events) goes through
:func:`publish_claimed`, in one transaction:

0. an outbox that must keep an order takes its advisory lock, or skips the pass;
1. the claim query marks up to ``limit`` rows published (``FOR UPDATE SKIP LOCKED``) and
   returns them;
2. one Kafka message per row is published;
3. after Kafka's acknowledgements, the rows it did not take are un-marked;
4. commit.

A crash anywhere before the commit rolls the marks back, so the rows are claimed again:
at-least-once onto Kafka, never lost. Several relays share a table through SKIP LOCKED.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.rows import RowFactory

from mailbus.relay.publisher import OutgoingMessage, PointerPublisher

__all__ = ["BatchResult", "Outbox", "publish_claimed"]

Row = TypeVar("Row")
Publish = Callable[[PointerPublisher, Sequence[OutgoingMessage], threading.Event], list[int]]
log = logging.getLogger("mailbus.relay")


@dataclass(frozen=True)
class Outbox(Generic[Row]):
    """A table the relay drains, and how one of its rows becomes a Kafka message."""

    name: str  # for logs: "send pointers", "dead letters"
    claim: str  # SQL taking %(limit)s, marking rows published and RETURNING them
    unclaim: str  # SQL taking %(ids)s, un-marking them
    row_factory: RowFactory[Row]
    row_id: Callable[[Row], int]
    to_message: Callable[[Row], OutgoingMessage]
    # SQL returning true when this relay may drain the table now (a transaction-level
    # advisory lock), false when another relay holds it; None: no lock.
    lock: str | None = None
    # How the messages go out; None: all at once (PointerPublisher.publish). Returns the
    # indexes of those not acknowledged.
    publish: Publish | None = None


@dataclass(frozen=True)
class BatchResult:
    claimed: int = 0
    unacknowledged: int = 0
    acknowledged_by_topic: Counter[str] = field(default_factory=Counter)

    @property
    def published(self) -> int:
        return self.claimed - self.unacknowledged


def publish_claimed(
    conn: psycopg.Connection[Any],
    outbox: Outbox[Row],
    limit: int,
    publisher: PointerPublisher,
    stop: threading.Event,
) -> BatchResult:
    """One claim-publish-commit pass over ``outbox`` on an autocommit connection."""
    with conn.transaction():
        if outbox.lock is not None and not _locked(conn, outbox.lock):
            return BatchResult()  # another relay drains this table now
        with conn.cursor(row_factory=outbox.row_factory) as cursor:
            # Planned afresh each time (a fraction of a millisecond per batch): a prepared
            # claim keeps a plan made for the table as it was, e.g. empty while the relay
            # idled, and then scans a new backlog in full for every batch.
            rows = cursor.execute(outbox.claim, {"limit": limit}, prepare=False).fetchall()
        if not rows:
            return BatchResult()
        messages = [outbox.to_message(row) for row in rows]
        if outbox.publish is None:
            failed = publisher.publish(messages, stop)
        else:
            failed = outbox.publish(publisher, messages, stop)
        if failed:
            conn.execute(outbox.unclaim, {"ids": [outbox.row_id(rows[i]) for i in failed]})
            log.warning(
                "kafka did not acknowledge %d of %d %s", len(failed), len(rows), outbox.name
            )
    unacknowledged = set(failed)
    by_topic = Counter(m.topic for i, m in enumerate(messages) if i not in unacknowledged)
    return BatchResult(len(rows), len(failed), by_topic)


def _locked(conn: psycopg.Connection[Any], lock: str) -> bool:
    row = conn.execute(lock).fetchone()
    return bool(row and row[0])
