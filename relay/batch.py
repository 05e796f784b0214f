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

A send pointer's ``send`` span ends when the pass does (with ``error.type`` unless Kafka
took it and the batch committed), and ``mailbus_relay_publish_delay_seconds`` observes
each committed pointer: how long its row had been due when claimed, plus the pass's
publish and commit; the traced mail that waited longest is the batch's exemplar.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.rows import RowFactory

from mailbus.kernel import metrics
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
    on_full: Callable[[], None] = lambda: None,
) -> BatchResult:
    """One claim-publish-commit pass over ``outbox`` on an autocommit connection.
    ``on_full``: called as soon as the claim took ``limit`` rows (more may be due)."""
    messages: list[OutgoingMessage] = []
    try:
        result = _pass(conn, outbox, limit, publisher, stop, messages, on_full)
    except BaseException as exc:
        _end_spans(messages, set(), type(exc).__name__)
        raise
    _end_spans(messages, result.failed, None)
    return result.counted


@dataclass(frozen=True)
class _Pass:
    counted: BatchResult
    failed: set[int]  # indexes Kafka did not acknowledge


def _pass(
    conn: psycopg.Connection[Any],
    outbox: Outbox[Row],
    limit: int,
    publisher: PointerPublisher,
    stop: threading.Event,
    messages: list[OutgoingMessage],
    on_full: Callable[[], None],
) -> _Pass:
    claimed_at = time.monotonic()
    with conn.transaction():
        if outbox.lock is not None and not _locked(conn, outbox.lock):
            return _Pass(BatchResult(), set())  # another relay drains it now
        with conn.cursor(row_factory=outbox.row_factory) as cursor:
            # Planned afresh each time (a fraction of a millisecond per batch): a prepared
            # claim keeps a plan made for the table as it was, e.g. empty while the relay
            # idled, and then scans a new backlog in full for every batch.
            rows = cursor.execute(outbox.claim, {"limit": limit}, prepare=False).fetchall()
        if not rows:
            return _Pass(BatchResult(), set())
        if len(rows) >= limit:
            on_full()
        messages.extend(outbox.to_message(row) for row in rows)
        if outbox.publish is None:
            failed = publisher.publish(messages, stop)
        else:
            failed = outbox.publish(publisher, messages, stop)
        if failed:
            conn.execute(outbox.unclaim, {"ids": [outbox.row_id(rows[i]) for i in failed]})
            log.warning(
                "kafka did not acknowledge %d of %d %s", len(failed), len(rows), outbox.name
            )
    published_at = time.monotonic()
    unacknowledged = set(failed)
    by_topic = Counter(m.topic for i, m in enumerate(messages) if i not in unacknowledged)
    published = [m for i, m in enumerate(messages) if i not in unacknowledged]
    exemplar = _longest_traced(published)
    for message in published:
        if message.due_s is not None:
            trace = message.span.context if message is exemplar and message.span else None
            metrics.observe_relay_delay(message.due_s + published_at - claimed_at, trace)
    return _Pass(BatchResult(len(rows), len(failed), by_topic), unacknowledged)


def _longest_traced(messages: Sequence[OutgoingMessage]) -> OutgoingMessage | None:
    """The sampled mail that waited longest: the batch's one exemplar (an exemplar costs
    about three plain observations, and a batch holds thousands)."""
    traced = [
        m
        for m in messages
        if m.due_s is not None and m.span and m.span.context and m.span.context.sampled
    ]
    return max(traced, key=lambda m: m.due_s or 0.0, default=None)


def _end_spans(messages: Sequence[OutgoingMessage], failed: set[int], error: str | None) -> None:
    for i, message in enumerate(messages):
        if message.span is not None:
            message.span.end(error or ("not_acknowledged" if i in failed else None))


def _locked(conn: psycopg.Connection[Any], lock: str) -> bool:
    row = conn.execute(lock).fetchone()
    return bool(row and row[0])
