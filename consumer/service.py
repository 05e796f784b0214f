"""Delivery of one send pointer: the core's decisions applied through the adapters.

    pointer → load row → (expired/suppressed/invalid | wait at the provider gate →
    guarded claim → provider call → [look-up]) → settle

A pointer is done when :meth:`DeliveryService.handle` returns: its outcome is recorded
in PostgreSQL (or there was nothing to do), so its offset may be committed. Storage
failures are retried until they succeed or the service stops; a stop leaves the pointer
undone (its offset uncommitted) and a ``sending`` row for the reconciler to resolve.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

from consumer.core import (
    Decision,
    RetryPolicy,
    SendView,
    Status,
    after_call,
    after_lookup,
    before_send,
    classify,
)
from consumer.gate import Admission, ProviderGate
from consumer.ledger import LoadedSend, MessageOrigin, SendLedger
from consumer.provider import HttpProvider, OutgoingMail
from mailbus.errors import CodecError, StorageError
from schemas.codec import send_pointer_codec

__all__ = ["DeliveryService", "Stopping"]

log = logging.getLogger("mailbus.consumer")
_T = TypeVar("_T")


class Stopping(Exception):
    """The service is shutting down; the work in hand is abandoned, not recorded."""


class DeliveryService:
    def __init__(
        self,
        ledger: SendLedger,
        provider: HttpProvider,
        gate: ProviderGate,
        policy: RetryPolicy,
        lease_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.gate = gate
        self.policy = policy
        self.lease_s = lease_s
        self.clock = clock
        self.rand = rand
        self.stopping = asyncio.Event()
        self._codec = send_pointer_codec()

    async def handle(self, origin: MessageOrigin) -> None:
        """Deliver the mail one Kafka message points at; return once the outcome is recorded."""
        try:
            pointer = self._codec.decode(origin.value)
        except CodecError as exc:
            error = str(exc)
            log.warning(
                "undecodable message at %s[%d]@%d: %s",
                origin.topic,
                origin.partition,
                origin.offset,
                error,
            )
            await self._durably(lambda: self.ledger.record_undecodable(origin, error))
            return
        loaded = await self._durably(lambda: self.ledger.load(pointer["send_id"]))
        if loaded is None or loaded.view.dedupe_key != pointer["dedupe_key"]:
            log.warning("pointer to a missing row %s", pointer["send_id"])
            return
        row = loaded.view
        if row.status is not Status.PENDING or row.attempts != pointer["attempt"]:
            return  # a duplicate or stale pointer: the row moved on without it
        verdict = before_send(row, self.clock(), loaded.suppressed)
        if verdict is not None:
            await self._durably(lambda: self.ledger.settle_gate(row, verdict, origin))
            return
        admission = await self.gate.admit_send()
        try:
            token = await self._durably(
                lambda: self.ledger.claim_for_send(row.id, row.attempts, self.lease_s)
            )
            if token is None:
                return  # someone else claimed it, or it is not due yet
            await self._call_and_settle(loaded, token, origin, admission)
        finally:
            self.gate.release(admission)

    async def resolve(self, loaded: LoadedSend, token: uuid.UUID) -> None:
        """Settle a row whose last call has no known outcome, by looking its key up."""
        decision = await self._look_up(loaded.view)
        await self._durably(lambda: self.ledger.settle_call(loaded.view, token, decision, None))

    async def _call_and_settle(
        self, loaded: LoadedSend, token: uuid.UUID, origin: MessageOrigin, admission: Admission
    ) -> None:
        row = replace(loaded.view, status=Status.SENDING, attempts=loaded.view.attempts + 1)
        mail = OutgoingMail(row.dedupe_key, row.to_address, row.template, loaded.variables)
        started = time.monotonic()
        result = classify(await self.provider.send(mail))
        latency_s = time.monotonic() - started
        latency_ms = int(latency_s * 1000)
        self.gate.settle(admission, result, latency_s)
        decision = after_call(row, result, self.clock(), self.policy, self.rand)
        if decision.next_status is Status.UNKNOWN:
            decision = await self._look_up(row)
        settled = await self._durably(
            lambda: self.ledger.settle_call(row, token, decision, origin, latency_ms)
        )
        if not settled:
            log.warning("lease on send %d was taken over before its outcome was recorded", row.id)

    async def _look_up(self, row: SendView) -> Decision:
        await self.gate.before_request()
        found = await self.provider.lookup(row.dedupe_key)
        return after_lookup(
            row,
            found.message_id,
            found.failed,
            self.clock(),
            self.policy,
            self.rand,
            detail=found.detail,
        )

    async def _durably(self, operation: Callable[[], Awaitable[_T]]) -> _T:
        """Run a storage operation until it succeeds; raise Stopping if asked to stop."""
        delay = 0.2
        while True:
            try:
                return await operation()
            except StorageError as exc:
                log.warning("database unavailable, retrying in %.1fs: %s", delay, exc)
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
                raise Stopping()
            except TimeoutError:
                delay = min(delay * 2, 5.0)
