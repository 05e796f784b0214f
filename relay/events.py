"""The relay's third outbox: outcome events (``email_send_events``) onto ``{prefix}.send.events``.

A trigger on ``email_sends`` records one event per reported change in the transaction
that made it (``schemas/sql/0015_send_events.sql``); the relay publishes them with the
same claim-publish-commit pass as send pointers (:mod:`mailbus.relay.batch`), and keeps every
send's events in the order of its changes:

- **one relay at a time**: the pass takes a transaction-level advisory lock first, so two
  relays never publish two batches at once (a later batch could overtake an earlier one);
- **in id order**, keyed by dedupe key (one send, one partition);
- **a send's next event only after Kafka acknowledged the one before**: a batch goes out
  in waves, the n-th event of each send in wave n (:func:`key_waves`); when Kafka refuses
  one, that send's later events of the batch are not produced, and all of them are
  claimed again by the next pass (:func:`publish_in_key_order`).

Delivery is at least once: a relay that dies after Kafka acknowledged and before its
commit publishes the batch again, so a consumer drops an ``event_id`` it has seen.
Published events are deleted after :data:`RETENTION_S` (:func:`prune_due`). Events of
settles that commit close together share a pass (:func:`gather_left`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from psycopg.rows import class_row

from mailbus.kernel.settings import Settings
from mailbus.relay.batch import Outbox
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.schemas.registry import ValueCodec, send_event_value_codec
from mailbus.schemas.send_event import SendEvent

__all__ = [
    "GATHER_S",
    "PRUNE_EVERY_S",
    "RETENTION_S",
    "gather_left",
    "key_waves",
    "prune_due",
    "publish_in_key_order",
    "send_event_message",
    "send_event_outbox",
]

RETENTION_S = 24 * 3600.0  # published events kept this long, then deleted
PRUNE_EVERY_S = 600.0  # how often a relay deletes them
GATHER_S = 0.05  # an event-lane pass starts at most this often, unless the one before was full


def key_waves(keys: Sequence[bytes]) -> list[list[int]]:
    """Indexes of ``keys`` in waves: wave n holds the n-th occurrence of every key, each
    wave in index order. Producing wave n+1 only after wave n was acknowledged keeps every
    key's order whatever Kafka refuses."""
    waves: list[list[int]] = []
    seen: dict[bytes, int] = {}
    for index, key in enumerate(keys):
        n = seen.get(key, 0)
        seen[key] = n + 1
        if n == len(waves):
            waves.append([])
        waves[n].append(index)
    return waves


def publish_in_key_order(
    publisher: PointerPublisher, messages: Sequence[OutgoingMessage], stop: threading.Event
) -> list[int]:
    """Publish ``messages`` wave by wave (:func:`key_waves`); the indexes not acknowledged,
    each refused message's later messages of the same key included (never produced)."""
    failed: list[int] = []
    refused: set[bytes] = set()
    for wave in key_waves([message.key for message in messages]):
        ready = [i for i in wave if messages[i].key not in refused]
        failed += (i for i in wave if messages[i].key in refused)
        if stop.is_set():
            failed += ready
            continue
        for lost in publisher.publish([messages[i] for i in ready], stop):
            failed.append(ready[lost])
            refused.add(messages[ready[lost]].key)
    return sorted(failed)


def gather_left(now: float, last_pass_at: float | None) -> float:
    """Seconds a woken event lane waits before its next pass (monotonic seconds).

    Every settle of the consumers commits a few events and a NOTIFY; a pass per NOTIFY
    would cost a transaction and a producer flush per settle (a tenth of a transaction per
    mail under load, as many as the consumer's loads). Starting passes at most every
    :data:`GATHER_S` publishes the events of all the settles in between in one, for at
    most that much more delay per event."""
    if last_pass_at is None:
        return 0.0
    return max(0.0, last_pass_at + GATHER_S - now)


def prune_due(now: float, last_pruned: float | None) -> bool:
    """Is it time to delete published events past their retention (monotonic seconds)?"""
    return last_pruned is None or now - last_pruned >= PRUNE_EVERY_S


def send_event_message(event: SendEvent, topic: str, codec: ValueCodec) -> OutgoingMessage:
    """The Kafka record of ``event``: Avro value, keyed by dedupe key, id and kind as headers."""
    return OutgoingMessage(
        topic=topic,
        key=event.kafka_key(),
        value=codec.encode(event.record()),
        headers=event.headers(),
    )


def send_event_outbox(settings: Settings, queries: dict[str, str]) -> Outbox[SendEvent]:
    topic = settings.events_topic
    codec = send_event_value_codec(settings)
    return Outbox(
        name="outcome events",
        claim=queries["claim_send_events"],
        unclaim=queries["unclaim_send_events"],
        row_factory=class_row(SendEvent),  # the claim returns exactly its fields
        row_id=lambda event: event.event_id,
        to_message=lambda event: send_event_message(event, topic, codec),
        lock=queries["lock_send_events"],
        publish=publish_in_key_order,
    )
