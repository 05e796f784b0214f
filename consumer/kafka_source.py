"""Kafka side of delivery: one consumer-group member per priority, in its own thread.

The thread owns the confluent-kafka Consumer (which is not thread-safe) and hands each
message to the asyncio loop, where it is delivered concurrently. Offsets are committed
per partition only below the lowest message still in flight (``PartitionProgress``), so
a commit never runs ahead of an outcome recorded in PostgreSQL. Backpressure pauses the
assignment while too much work is outstanding. On revoke the thread waits for the
partitions' in-flight work (up to ``drain_s``), commits what is done, and lets go;
anything unfinished is redelivered to the new owner and made harmless by the guarded
claim.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from consumer.core.offsets import PartitionProgress
from consumer.ledger import MessageOrigin
from mailbus import metrics

__all__ = ["KafkaSource"]

log = logging.getLogger("mailbus.consumer.kafka")
_COMMIT_INTERVAL_S = 0.5
Handler = Callable[[MessageOrigin], Coroutine[Any, Any, None]]


class KafkaSource(threading.Thread):
    def __init__(
        self,
        *,
        bootstrap: str,
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
        self._drain_s = drain_s
        self._stop_event = stop
        self._lock = threading.Lock()
        self._progress: dict[int, PartitionProgress] = {}
        self._outstanding = 0
        self._paused = False
        self.failure: BaseException | None = None
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1_000,
                "max.poll.interval.ms": 300_000,
                "fetch.wait.max.ms": 100,
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
                self._apply_backpressure()
                batch = self._consumer.consume(num_messages=500, timeout=0.1)
                for message in batch:
                    self._dispatch(message)
                if time.monotonic() - last_commit >= _COMMIT_INTERVAL_S:
                    self._commit(asynchronous=True)
                    last_commit = time.monotonic()
            self._drain()
        except BaseException as exc:  # surfaced by the runner, which exits non-zero
            self.failure = exc
            log.exception("kafka source for %s failed", self.topic)
        finally:
            self._consumer.close()

    def _dispatch(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error on %s: %s", self.topic, error.str())
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return  # only error events lack these, and those were handled above
        with self._lock:
            progress = self._progress.get(partition)
            if progress is None:  # a message of a partition revoked meanwhile
                return
            progress.started(offset)
            self._outstanding += 1
        origin = MessageOrigin(topic, partition, offset, message.key(), message.value())
        future = asyncio.run_coroutine_threadsafe(self._handler(origin), self._loop)
        future.add_done_callback(lambda f: self._finished(partition, offset, f))

    def _finished(
        self, partition: int, offset: int, future: concurrent.futures.Future[None]
    ) -> None:
        # A handler that raised abandoned the message: its offset must not be committed.
        done = not future.cancelled() and future.exception() is None
        with self._lock:
            self._outstanding -= 1
            progress = self._progress.get(partition)
            if progress is not None and done:
                progress.finished(offset)

    def _apply_backpressure(self) -> None:
        with self._lock:
            outstanding = self._outstanding
        if not self._paused and outstanding >= self._high_water:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
        elif self._paused and outstanding <= self._low_water:
            self._consumer.resume(self._consumer.assignment())
            self._paused = False

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
