"""Kafka side of the relay: an idempotent producer that reports which messages landed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from mailbus.kernel.errors import MailbusError
from mailbus.kernel.tracing import OpenSpan

__all__ = ["OutgoingMessage", "PointerPublisher", "PublishError"]


class PublishError(MailbusError):
    """The producer is unusable (fatal idempotence error, bad configuration)."""


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    # a send pointer's: its ``send`` span, ended when the batch commits, and how long its
    # row had been due when claimed (mailbus_relay_publish_delay_seconds)
    span: OpenSpan | None = None
    due_s: float | None = None


class PointerPublisher:
    """Publishes batches with ``acks=all`` and idempotence, waiting for every report."""

    def __init__(
        self,
        client_config: Mapping[str, str | int | float | bool],
        delivery_timeout_s: float = 60.0,
    ) -> None:
        """``client_config``: the brokers and their TLS/SASL settings
        (:func:`mailbus.kernel.kafka_security.kafka_client_config`)."""
        self.delivery_timeout_s = delivery_timeout_s
        self._producer = Producer(
            {
                **client_config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 10000,
                "compression.type": "lz4",
                # Same partition for a key whatever the client (Java, faust, aiokafka).
                "partitioner": "murmur2_random",
                "message.timeout.ms": int(delivery_timeout_s * 1000),
                "queue.buffering.max.messages": 200_000,
                "logger": logging.getLogger("mailbus.kafka"),
            }
        )

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        """Send ``messages``; return the indexes of those Kafka did NOT acknowledge.

        Waits until every delivery report arrived, the delivery timeout passed, or ``stop``
        is set. Whatever is abandoned counts as not acknowledged: if Kafka still takes it,
        the row is published twice, which the consumer's guarded claim makes harmless.
        """
        acknowledged: set[int] = set()
        reported = 0

        def report(index: int) -> Callable[[KafkaError | None, object], None]:
            def on_delivery(err: KafkaError | None, _msg: object) -> None:
                nonlocal reported
                reported += 1
                if err is None:
                    acknowledged.add(index)

            return on_delivery

        for index, message in enumerate(messages):
            self._produce(message, report(index))
        deadline = time.monotonic() + self.delivery_timeout_s + 5
        while reported < len(messages) and not stop.is_set() and time.monotonic() < deadline:
            self._producer.flush(0.2)
        return [index for index in range(len(messages)) if index not in acknowledged]

    def _produce(
        self, message: OutgoingMessage, on_delivery: Callable[[KafkaError | None, object], None]
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    message.topic,
                    key=message.key,
                    value=message.value,
                    headers=list(message.headers) or None,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let reports drain
            except KafkaException as exc:
                raise PublishError(f"produce failed: {exc.args[0].str()}") from None

    def close(self, timeout: float = 5.0) -> None:
        self._producer.flush(timeout)
