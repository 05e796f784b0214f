"""One batch of events in: dead letters out first, then the rows in one transaction.

:func:`sort_batch` is pure (events in, rows and dead letters out). :class:`IntakeService`
applies a batch and returns only once both are durable: the dead letters acknowledged by
the broker, the rows committed. Until then it retries (PostgreSQL or Kafka away) with a
capped backoff; it never returns with work undone, so the caller may acknowledge the
batch's offsets exactly when :meth:`IntakeService.handle` returns. Cancelled (the worker
stops) it leaves the batch unacknowledged, to be read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mailbus.kernel import health
from mailbus.kernel.errors import MailbusError
from mailbus.kernel.metrics import observe_intake

from .dead_letters import DeadLetterProducer, IntakeDeadLetter
from .events import EventReader, NewRow, Rejected
from .rows import RowWriter, letters_document, rows_document

__all__ = ["Incoming", "IntakeService", "IntakeStats", "PreparedBatch", "sort_batch"]

log = logging.getLogger("mailbus.intake")
T = TypeVar("T")

_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 10.0


@dataclass(frozen=True)
class Incoming:
    """One event as read from Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class PreparedBatch:
    events: int
    rows: str | None  # the rows, as the insert statement reads them; None: no rows
    letters_document: str | None  # the dead letters, likewise
    letters: list[IntakeDeadLetter]


@dataclass
class IntakeStats:
    events: int = 0
    inserted: int = 0  # rows created; the rest of the valid events were duplicates
    dead_letters: int = 0
    batches: int = 0
    retries: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


def sort_batch(
    reader: EventReader, batch: Sequence[Incoming]
) -> tuple[list[NewRow], list[IntakeDeadLetter]]:
    rows: list[NewRow] = []
    letters: list[IntakeDeadLetter] = []
    for event in batch:
        decision = reader.read(event.value)
        if isinstance(decision, Rejected):
            letters.append(
                IntakeDeadLetter(
                    reason=f"intake_{decision.reason}",
                    error=decision.error,
                    topic=event.topic,
                    partition=event.partition,
                    offset=event.offset,
                    key=event.key,
                    value=event.value,
                    headers=event.headers,
                )
            )
        else:
            rows.append(decision)
    return rows, letters


class IntakeService:
    def __init__(self, reader: EventReader, writer: RowWriter, dlq: DeadLetterProducer) -> None:
        self._reader = reader
        self._writer = writer
        self._dlq = dlq
        self.stats = IntakeStats()

    async def handle(self, batch: Sequence[Incoming]) -> None:
        await self.apply(self.prepare(batch))

    def prepare(self, batch: Sequence[Incoming]) -> PreparedBatch:
        """The CPU part: decode and validate, build the statement's document (no I/O)."""
        rows, letters = sort_batch(self._reader, batch)
        for letter in letters:
            log.warning(
                "event to %s: %s at %s[%d]@%d",
                self._dlq.topic,
                letter.error,
                letter.topic,
                letter.partition,
                letter.offset,
            )
        return PreparedBatch(
            len(batch),
            rows_document(rows) if rows else None,
            letters_document(letters) if letters else None,
            letters,
        )

    async def apply(self, prepared: PreparedBatch) -> None:
        """The I/O part: returns once the dead letters are on Kafka and the rows committed."""
        letters = prepared.letters
        await self._until_done("publish dead letters", lambda: self._dlq.publish(letters))
        inserted = await self._until_done(
            "insert rows",
            lambda: self._writer.insert(prepared.rows, prepared.letters_document),
        )
        observe_intake(inserted, prepared.events - len(letters) - inserted, len(letters))
        stats = self.stats
        stats.events += prepared.events
        stats.inserted += inserted
        stats.dead_letters += len(letters)
        stats.batches += 1
        for letter in letters:
            stats.by_reason[letter.reason] = stats.by_reason.get(letter.reason, 0) + 1

    async def close(self) -> None:
        await self._writer.close()

    async def _until_done(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        delay = _FIRST_RETRY_S
        while True:
            try:
                done = await step()
                health.mark("intake", True)
                return done
            except MailbusError as exc:
                health.mark("intake", False, f"cannot {what}")
                self.stats.retries += 1
                log.warning("intake cannot %s (retrying in %.1fs): %s", what, delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY_S)
