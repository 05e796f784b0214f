"""One batch of events in: dead letters out first, then the rows in one transaction.

:func:`sort_batch` is pure (events in, rows and dead letters out). :class:`IntakeService`
applies a batch and returns only once both are durable: the dead letters acknowledged by
the broker, the rows committed. Until then it waits and tries again, for what is
temporary: PostgreSQL or Kafka away, a missing grant, the schema registry away (then the
batch is read again, and nothing becomes a dead letter). What is permanent for one event
never holds the others up: a row PostgreSQL refuses for its data (:class:`UnstorableError`)
is found by splitting the batch in halves and set aside as a dead letter, and a dead letter
too large to publish is published cut (``mailbus.intake.dead_letters``). It never returns with work
undone, so the caller may acknowledge the batch's offsets exactly when
:meth:`IntakeService.handle` returns. Cancelled (the worker stops) it leaves the batch
unacknowledged, to be read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from mailbus.kernel import health
from mailbus.kernel.errors import MailbusError, UnstorableError
from mailbus.kernel.metrics import observe_intake, observe_malformed_trace
from mailbus.kernel.tracecontext import from_headers
from mailbus.kernel.tracing import NOOP, Attributes, Tracer, current

from .dead_letters import DeadLetterProducer, IntakeDeadLetter
from .events import EventReader, NewRow, Rejected, Waiting
from .rows import RowWriter, letters_documents, rows_document

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
class Sorted:
    """A batch's events sorted: rows (with their events), dead letters, and why the batch
    must wait (an event that cannot be decoded yet), if it must."""

    rows: list[tuple[Incoming, NewRow]]
    letters: list[IntakeDeadLetter]
    waiting: str | None
    malformed_traces: int = 0  # events whose traceparent header was ignored


@dataclass(frozen=True)
class PreparedBatch:
    batch: Sequence[Incoming]
    rows: list[tuple[Incoming, NewRow]]
    document: str | None  # the rows, as the insert statement reads them; None: no rows
    letters: list[IntakeDeadLetter]
    waiting: str | None  # set: read the batch again before writing anything


@dataclass
class IntakeStats:
    events: int = 0
    inserted: int = 0  # rows created to be mailed; the rest of the valid events were duplicates
    too_old: int = 0  # rows recorded expired: older than MAILBUS_INTAKE_MAX_AGE
    dead_letters: int = 0
    batches: int = 0
    retries: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


def dead_letter(event: Incoming, reason: str, error: str) -> IntakeDeadLetter:
    return IntakeDeadLetter(
        reason=reason,
        error=error,
        topic=event.topic,
        partition=event.partition,
        offset=event.offset,
        key=event.key,
        value=event.value,
        headers=event.headers,
    )


def sort_batch(reader: EventReader, batch: Sequence[Incoming], tracer: Tracer = NOOP) -> Sorted:
    """Rows and dead letters of ``batch``; each row continues its event's trace, under the
    event's ``process`` span when ``tracer`` exports (docs/guides/tracing.md)."""
    rows: list[tuple[Incoming, NewRow]] = []
    letters: list[IntakeDeadLetter] = []
    malformed = 0
    for event in batch:
        decision = reader.read(event.value)
        if isinstance(decision, Waiting):
            return Sorted([], [], decision.error)
        if isinstance(decision, Rejected):
            letters.append(dead_letter(event, f"intake_{decision.reason}", decision.error))
            continue
        carried = from_headers(event.headers)
        malformed += carried.malformed
        name, attributes = _process_span(event)
        with tracer.span(name, carried.context, attributes, kind="consumer"):
            context = current()
        if context is not None:
            decision = replace(
                decision, traceparent=context.traceparent, tracestate=context.tracestate
            )
        rows.append((event, decision))
    return Sorted(rows, letters, None, malformed)


def _process_span(event: Incoming) -> tuple[str, Attributes]:
    return f"process {event.topic}", {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": event.topic,
        "messaging.destination.partition.id": str(event.partition),
        "messaging.kafka.offset": event.offset,
    }


class IntakeService:
    def __init__(
        self,
        reader: EventReader,
        writer: RowWriter,
        dlq: DeadLetterProducer,
        tracer: Tracer = NOOP,
    ) -> None:
        self._tracer = tracer  # MAILBUS_OTEL_EXPORTER: a span per event
        self._reader = reader
        self._writer = writer
        self._dlq = dlq
        self.stats = IntakeStats()

    async def handle(self, batch: Sequence[Incoming]) -> None:
        await self.apply(self.prepare(batch))

    def prepare(self, batch: Sequence[Incoming]) -> PreparedBatch:
        """The CPU part: decode and validate, build the statement's document (no I/O)."""
        found = sort_batch(self._reader, batch, self._tracer)
        for _ in range(found.malformed_traces):
            observe_malformed_trace("intake")
        for letter in found.letters:
            log.warning(
                "event to %s: %s at %s[%d]@%d",
                self._dlq.topic,
                letter.error,
                letter.topic,
                letter.partition,
                letter.offset,
            )
        rows = [row for _, row in found.rows]
        document = rows_document(rows) if rows else None
        return PreparedBatch(batch, found.rows, document, found.letters, found.waiting)

    async def apply(self, prepared: PreparedBatch) -> None:
        """The I/O part: returns once the dead letters are on Kafka and the rows committed."""
        delay = _FIRST_RETRY_S
        while prepared.waiting is not None:  # temporary: no dead letter, the offset stays
            self._retrying("decode events", prepared.waiting, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY_S)
            prepared = await asyncio.to_thread(self.prepare, prepared.batch)
        letters = await self._publish(prepared.letters)
        inserted, too_old, set_aside = await self._write(prepared.rows, prepared.document, letters)
        letters = [*letters, *set_aside]
        duplicates = len(prepared.batch) - len(letters) - inserted - too_old
        observe_intake(inserted, duplicates, len(letters), too_old)
        stats = self.stats
        stats.events += len(prepared.batch)
        stats.inserted += inserted
        stats.too_old += too_old
        stats.dead_letters += len(letters)
        stats.batches += 1
        for letter in letters:
            stats.by_reason[letter.reason] = stats.by_reason.get(letter.reason, 0) + 1

    async def close(self) -> None:
        await self._writer.close()

    async def _publish(self, letters: list[IntakeDeadLetter]) -> list[IntakeDeadLetter]:
        """Publish ``letters`` (some maybe cut, see intake.dead_letters); return them whole,
        as the table keeps them."""
        await self._until_done("publish dead letters", lambda: self._dlq.publish(letters))
        return letters

    async def _write(
        self,
        rows: list[tuple[Incoming, NewRow]],
        document: str | None,
        letters: list[IntakeDeadLetter],
    ) -> tuple[int, int, list[IntakeDeadLetter]]:
        """Insert ``rows`` and ``letters``; a refused row is found by halving and set aside.
        Return the rows inserted, those recorded too old, and the letters set aside."""
        documents = letters_documents(letters)
        try:
            inserted, too_old = await self._until_done(
                "insert rows", lambda: self._writer.insert(document, documents)
            )
            return inserted, too_old, []
        except UnstorableError as exc:
            if not rows:  # the letters alone: built to be storable, so never expected
                raise MailbusError(f"intake dead letters refused: {exc}") from None
            if len(rows) == 1:
                event, row = rows[0]
                log.warning("row %s refused, set aside as a dead letter: %s", row.dedupe_key, exc)
                refused = dead_letter(event, "intake_invalid", f"{row.event}: not storable: {exc}")
                await self._publish([refused])
                await self._write([], None, [*letters, refused])
                return 0, 0, [refused]
        half = len(rows) // 2
        parts: list[tuple[list[tuple[Incoming, NewRow]], list[IntakeDeadLetter]]] = [
            (rows[:half], letters),
            (rows[half:], []),
        ]
        totals = [0, 0]
        set_aside: list[IntakeDeadLetter] = []
        for part, with_letters in parts:
            done = await self._write(part, rows_document([r for _, r in part]), with_letters)
            totals[0] += done[0]
            totals[1] += done[1]
            set_aside += done[2]
        return totals[0], totals[1], set_aside

    def _retrying(self, what: str, why: object, delay: float) -> None:
        health.mark("intake", False, f"cannot {what}")
        self.stats.retries += 1
        log.warning("intake cannot %s (retrying in %.1fs): %s", what, delay, why)

    async def _until_done(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """``step`` until it succeeds; a temporary failure waits and tries again, a
        permanent one (:class:`UnstorableError`) is the caller's to handle."""
        delay = _FIRST_RETRY_S
        while True:
            try:
                done = await step()
                health.mark("intake", True)
                return done
            except UnstorableError:
                raise
            except MailbusError as exc:
                self._retrying(what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY_S)
