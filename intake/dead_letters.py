"""The intake DLQ, ``{prefix}.intake.dlq``: the event's own bytes, and why and where as headers.

The record keeps the original key, value and headers untouched (so a fixed intake, or a
person with kcat, can replay it as it was) and adds the headers the send DLQ uses
(``mailbus.schemas.dead_letter``), under the same prefix:

=================================  ============================================
``mailbus.dlq.reason``             ``undecodable`` or ``invalid``
``mailbus.dlq.error``              what was wrong, naming the field (never its value)
``mailbus.dlq.original.topic``     where the event was read
``mailbus.dlq.original.partition``
``mailbus.dlq.original.offset``
=================================  ============================================

:func:`dead_letter_headers` is pure; :class:`DeadLetterProducer` is the Kafka adapter
(confluent-kafka). A batch's dead letters are acknowledged by the broker before the batch's
rows commit and its offsets advance: a crash in between repeats them (at least once),
never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from mailbus.kernel.errors import MailbusError
from mailbus.schemas.dead_letter import HEADER_PREFIX

__all__ = ["DeadLetterProducer", "IntakeDeadLetter", "dead_letter_headers"]

_MAX_ERROR = 500


@dataclass(frozen=True)
class IntakeDeadLetter:
    """One rejected event, as read."""

    reason: str
    error: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def dead_letter_headers(letter: IntakeDeadLetter) -> list[tuple[str, str | bytes | None]]:
    """The original headers, then the why and where (UTF-8 text, numbers in decimal)."""
    added = (
        ("reason", letter.reason),
        ("error", letter.error[:_MAX_ERROR]),
        ("original.topic", letter.topic),
        ("original.partition", str(letter.partition)),
        ("original.offset", str(letter.offset)),
    )
    return [*letter.headers, *((HEADER_PREFIX + name, value.encode()) for name, value in added)]


class DeadLetterProducer:
    """Publishes dead letters and waits until the broker acknowledged every one."""

    def __init__(
        self, client_config: Mapping[str, object], topic: str, timeout: float = 30.0
    ) -> None:
        """``client_config``: bootstrap servers, TLS and SASL (``kafka_client_config``)."""
        self.topic = topic
        self._timeout = timeout
        self._producer = Producer(
            {
                **client_config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )

    async def publish(self, letters: Sequence[IntakeDeadLetter]) -> None:
        if letters:
            await asyncio.to_thread(self._publish, letters)

    def _publish(self, letters: Sequence[IntakeDeadLetter]) -> None:
        failures: list[str] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failures.append(error.str())

        try:
            for letter in letters:
                self._producer.produce(
                    self.topic,
                    key=letter.key,
                    value=letter.value,
                    headers=dead_letter_headers(letter),
                    on_delivery=delivered,
                )
        except (KafkaException, BufferError) as exc:
            raise MailbusError(
                f"intake dead letters not published to {self.topic}: {exc}"
            ) from None
        remaining = self._producer.flush(self._timeout)
        if remaining or failures:
            reason = failures[0] if failures else f"{remaining} not acknowledged in time"
            raise MailbusError(f"intake dead letters not published to {self.topic}: {reason}")

    def close(self) -> None:
        self._producer.flush(self._timeout)
