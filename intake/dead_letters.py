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
``mailbus.dlq.truncated``          only when the record had to be cut to be published
=================================  ============================================

A record the broker or the client refuses for good (``MSG_SIZE_TOO_LARGE``: an event near
the broker's limit, plus our headers, is over it) must not hold the intake up: the batch
is published again one record at a time, and a record refused alone is published in
shorter forms (:func:`shorter_forms`: the value cut to 64 KiB and the original headers
dropped, then no value at all), the ``truncated`` header saying what was cut. The table's
copy (``email_dead_letters``) keeps the whole event.

:func:`dead_letter_headers` is pure; :class:`DeadLetterProducer` is the Kafka adapter
(confluent-kafka). A batch's dead letters are acknowledged by the broker before the batch's
rows commit and its offsets advance: a crash in between repeats them (at least once),
never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from mailbus.kernel.errors import MailbusError
from mailbus.schemas.dead_letter import HEADER_PREFIX

__all__ = ["DeadLetterProducer", "IntakeDeadLetter", "dead_letter_headers", "shorter_forms"]

_MAX_ERROR = 500
_CUT_VALUE = 64 * 1024
_CUT_KEY = 1024
# Refusals of one record that no retry can change (librdkafka's local and the broker's).
_PERMANENT = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
    }
)


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
    truncated: str | None = None  # what was cut to publish it (the table keeps it whole)


def shorter_forms(letter: IntakeDeadLetter) -> Iterator[IntakeDeadLetter]:
    """Ever shorter records of ``letter`` for a broker that refused it as too large."""
    key = None if letter.key is None else letter.key[:_CUT_KEY]
    size = len(letter.value or b"")
    dropped = f"{len(letter.headers)} original headers dropped"
    if size > _CUT_VALUE:
        yield replace(
            letter,
            key=key,
            value=(letter.value or b"")[:_CUT_VALUE],
            headers=(),
            truncated=f"value of {size} bytes cut to {_CUT_VALUE}; {dropped}",
        )
    yield replace(
        letter,
        key=key,
        value=None,
        headers=(),
        truncated=f"value of {size} bytes left out; {dropped}",
    )


def dead_letter_headers(letter: IntakeDeadLetter) -> list[tuple[str, str | bytes | None]]:
    """The original headers, then the why and where (UTF-8 text, numbers in decimal)."""
    added = (
        ("reason", letter.reason),
        ("error", letter.error[:_MAX_ERROR]),
        ("original.topic", letter.topic),
        ("original.partition", str(letter.partition)),
        ("original.offset", str(letter.offset)),
        *((("truncated", letter.truncated),) if letter.truncated else ()),
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
        """Publish ``letters``, a record refused for its size in a shorter form."""
        if letters:
            await asyncio.to_thread(self._publish_all, letters)

    def _publish_all(self, letters: Sequence[IntakeDeadLetter]) -> None:
        if not self._publish(letters):
            return
        for letter in letters:  # one at a time: which record is refused alone?
            if self._publish([letter]):
                self._publish_shorter(letter)

    def _publish_shorter(self, letter: IntakeDeadLetter) -> None:
        for form in shorter_forms(letter):
            if not self._publish([form]):
                return
        raise MailbusError(f"intake dead letter refused by {self.topic} even without its value")

    def _publish(self, letters: Sequence[IntakeDeadLetter]) -> list[str]:
        """Publish and wait; the permanent refusals (none: all acknowledged). A temporary
        failure raises :class:`MailbusError`, to be retried."""
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failures.append(error)

        try:
            for letter in letters:
                try:
                    self._producer.produce(
                        self.topic,
                        key=letter.key,
                        value=letter.value,
                        headers=dead_letter_headers(letter),
                        on_delivery=delivered,
                    )
                except KafkaException as exc:
                    if exc.args[0].code() not in _PERMANENT:
                        raise
                    failures.append(exc.args[0])
        except (KafkaException, BufferError) as exc:
            raise MailbusError(
                f"intake dead letters not published to {self.topic}: {exc}"
            ) from None
        remaining = self._producer.flush(self._timeout)
        temporary = [error.str() for error in failures if error.code() not in _PERMANENT]
        if remaining or temporary:
            reason = temporary[0] if temporary else f"{remaining} not acknowledged in time"
            raise MailbusError(f"intake dead letters not published to {self.topic}: {reason}")
        return [error.str() for error in failures]

    def close(self) -> None:
        self._producer.flush(self._timeout)
