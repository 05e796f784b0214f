"""Kafka side of delivery: one consumer-group member per priority, in its own thread.

The thread owns the confluent-kafka Consumer (which is not thread-safe) and hands each
batch it polls to the asyncio loop in one call, where each message is delivered
concurrently. Offsets are committed per partition only below the lowest message still in
flight (``PartitionProgress``), so a commit never runs ahead of an outcome recorded in
PostgreSQL. Backpressure first takes only as many messages as there is room for
(librdkafka keeps prefetching meanwhile); only after a second without room (an outage)
does it pause the assignment, because a resume refetches what the pause discarded, which
stalls the flow for a few hundred milliseconds.
On revoke the thread waits for the partitions' in-flight work (up to ``drain_s``), commits
what is done, and lets go; anything unfinished is redelivered to the new owner and made
harmless by the guarded claim. A message's ``traceparent`` header (docs/guides/tracing.md)
comes along as ``MessageOrigin.trace``; a malformed one is counted and ignored. Its
``mailbus-first-attempt`` header (:mod:`mailbus.schemas.pointer_headers`) comes along as
``MessageOrigin.first_attempt``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from mailbus.consumer.core.offsets import PartitionProgress
from mailbus.consumer.ledger import MessageOrigin
from mailbus.kernel import health, metrics
from mailbus.kernel.tracecontext import from_headers
from mailbus.schemas.pointer_headers import first_attempt_template

__all__ = ["KafkaSource"]

log = logging.getLogger("mailbus.consumer.kafka")
_COMMIT_INTERVAL_S = 0.5
_PAUSE_AFTER_S = 1.0  # without room for a message this long: pause the assignment
Handler = Callable[[MessageOrigin], Coroutine[Any, Any, None]]


class KafkaSource(threading.Thread):
    def __init__(
        self,
        *,
        client_config: Mapping[str, str | int | float | bool],
        group_id: str,
        topic: str,
        handler: Handler,
        loop: asyncio.AbstractEventLoop,
        max_outstanding: int,
        drain_s: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"kafka-{topic}", daemon=True)
        self.topic = topic
        self._handler = handler
        self._loop = loop
        self._high_water = max_outstanding
        self._low_water = max(1, max_outstanding // 2)
        self._full_since: float | None = None
        self._drain_s = drain_s
        self._stop_event = stop
        self._lock = threading.Lock()
        self._progress: dict[int, PartitionProgress] = {}
        self._outstanding = 0
        self._paused = False
        self._tasks: set[asyncio.Task[None]] = set()  # strong references while running
        self.failure: BaseException | None = None
        health.mark(f"kafka:{topic}", False, "joining the consumer group")
        self._consumer = Consumer(
            {
                **client_config,  # brokers, TLS/SASL
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1_000,
                "max.poll.interval.ms": 300_000,
                "fetch.wait.max.ms": 100,
                "queued.min.messages": 10_000,  # prefetched per partition (pointers are small)
                "logger": logging.getLogger("mailbus.kafka"),
                "statistics.interval.ms": 5000,
                "stats_cb": metrics.record_librdkafka_stats,  # consumer lag per partition
            }
        )

    # -- thread body ------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._consumer.subscribe(
                [self.topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            last_commit = time.monotonic()
            while not self._stop_event.is_set():
                room = self._room()
                if room == 0 and not self._paused:
                    time.sleep(0.005)  # a moment for outstanding work to finish
                else:  # when paused, polling serves rebalances and returns no message
                    batch = self._poll(room)
                    origins = [o for o in map(self._accept, batch) if o is not None]
                    if origins:
                        self._loop.call_soon_threadsafe(self._start_deliveries, origins)
                if time.monotonic() - last_commit >= _COMMIT_INTERVAL_S:
                    self._commit(asynchronous=True)
                    last_commit = time.monotonic()
            self._drain()
        except BaseException as exc:  # surfaced by the runner, which exits non-zero
            health.mark(f"kafka:{self.topic}", False, "the Kafka source failed")
            self.failure = exc
            log.exception("kafka source for %s failed", self.topic)
        finally:
            self._consumer.close()

    def _poll(self, room: int) -> list[Message]:
        """Wait (up to 0.1 s) for one message, then take what else is already fetched, up to
        ``room``: ``consume(n, timeout)`` alone would wait for all ``n`` until the timeout,
        adding up to 100 ms to every mail when traffic is light."""
        first = self._consumer.poll(0.1)
        if first is None:
            return []
        if room <= 1:
            return [first]
        return [first, *self._consumer.consume(num_messages=room - 1, timeout=0)]

    def _accept(self, message: Message) -> MessageOrigin | None:
        """Count a polled message as in flight; None for error events and for messages of
        a partition revoked meanwhile."""
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error on %s: %s", self.topic, error.str())
            return None
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return None  # only error events lack these, and those were handled above
        with self._lock:
            progress = self._progress.get(partition)
            if progress is None:
                return None
            progress.started(offset)
            self._outstanding += 1
        headers = message.headers()
        carried = from_headers(headers)
        if carried.malformed:
            metrics.observe_malformed_trace("consumer")
        return MessageOrigin(
            topic,
            partition,
            offset,
            message.key(),
            message.value(),
            carried.context,
            first_attempt_template(headers),
        )

    def _start_deliveries(self, origins: list[MessageOrigin]) -> None:
        """On the event loop: one task per message."""
        for origin in origins:
            task = self._loop.create_task(self._handler(origin))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, origin))

    def _finished(self, origin: MessageOrigin, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        # A handler that raised abandoned the message: its offset must not be committed.
        done = not task.cancelled() and task.exception() is None
        with self._lock:
            self._outstanding -= 1
            progress = self._progress.get(origin.partition)
            if progress is not None and done:
                progress.finished(origin.offset)

    def _room(self) -> int:
        """How many more messages to take now (at most 500); pauses the assignment after
        ``_PAUSE_AFTER_S`` without room and resumes it at the low-water mark."""
        with self._lock:
            outstanding = self._outstanding
        now = time.monotonic()
        if outstanding < self._high_water:
            self._full_since = None
        elif self._full_since is None:
            self._full_since = now
        elif not self._paused and now - self._full_since >= _PAUSE_AFTER_S:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
        if self._paused and outstanding <= self._low_water:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False
        return min(max(self._high_water - outstanding, 0), 500)

    # -- offsets ------------------------------------------------------------------------

    def _commit(self, asynchronous: bool, partitions: list[int] | None = None) -> None:
        offsets = []
        with self._lock:
            for partition, progress in self._progress.items():
                if partitions is not None and partition not in partitions:
                    continue
                committable = progress.committable()
                if committable is not None:
                    offsets.append(TopicPartition(self.topic, partition, committable))
                    progress.mark_committed(committable)
        if not offsets:
            return
        try:
            if asynchronous:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Not fatal: the next commit carries a higher offset; redelivery is harmless.
            log.warning("offset commit failed on %s: %s", self.topic, exc.args[0].str())

    def _wait_for_in_flight(self, partitions: list[int], deadline: float) -> None:
        while time.monotonic() < deadline:
            with self._lock:
                busy = sum(self._progress[p].in_flight for p in partitions if p in self._progress)
            if busy == 0:
                return
            time.sleep(0.05)

    def _drain(self) -> None:
        """On stop: take no more messages, let in-flight work finish, commit it."""
        self._consumer.pause(self._consumer.assignment())
        with self._lock:
            partitions = list(self._progress)
        self._wait_for_in_flight(partitions, time.monotonic() + self._drain_s)
        self._commit(asynchronous=False)

    # -- rebalance callbacks (run inside consume(), on this thread) ---------------------

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        health.mark(f"kafka:{self.topic}", True)  # in the group (an empty share is fine)
        with self._lock:
            for tp in partitions:
                self._progress.setdefault(tp.partition, PartitionProgress())
        if self._paused:
            self._consumer.pause(partitions)
        log.info("assigned %s %s", self.topic, [tp.partition for tp in partitions])

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        self._wait_for_in_flight(numbers, time.monotonic() + self._drain_s)
        self._commit(asynchronous=False, partitions=numbers)
        self._forget(numbers)
        log.info("revoked %s %s", self.topic, numbers)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._forget([tp.partition for tp in partitions])  # no commit: we no longer own them

    def _forget(self, partitions: list[int]) -> None:
        with self._lock:
            for partition in partitions:
                self._progress.pop(partition, None)
