"""Delivery of one send pointer: the core's decisions applied through the adapters.

    pointer → load row → (expired/suppressed/invalid | [in-flight slot: provider gate →
    guarded claim → provider call → look-up?] → settle)

Only the provider's part holds one of the process's in-flight slots; loading and
settling, which the ledger batches, do not. A pointer is done when
:meth:`DeliveryService.handle` returns: its outcome is recorded in PostgreSQL (or there
was nothing to do), so its offset may be committed. Storage failures are retried until
they succeed or the service stops; a stop leaves the pointer undone (its offset
uncommitted) and a ``sending`` row for the reconciler to resolve.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
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
    confirm_failure,
    needs_confirmation,
)
from consumer.core.breaker import BreakerState
from consumer.gate import Admission, ProviderGate
from consumer.ledger import LoadedSend, MessageOrigin, SendLedger, dead_letter_reason
from consumer.provider import HttpProvider, LookupResult, OutgoingMail
from mailbus import metrics
from mailbus.errors import CodecError, StorageError
from mailbus.policies import PolicyBook
from schemas.codec import send_pointer_codec

__all__ = ["DeliveryService", "Stopping"]

log = logging.getLogger("mailbus.consumer")
_T = TypeVar("_T")


class Stopping(Exception):
    """The service is shutting down; the work in hand is abandoned, not recorded."""


@dataclass(frozen=True)
class _Attempt:
    """A call made under a lease, and what the core decided of it."""

    row: SendView
    token: uuid.UUID
    decision: Decision
    latency_s: float
    status_code: int | None


FALLBACK = "fallback"  # email_sends.provider of a call taken by the fallback provider


class DeliveryService:
    def __init__(
        self,
        ledger: SendLedger,
        provider: HttpProvider,
        gate: ProviderGate,
        policy: RetryPolicy,
        slot_wait_s: float,
        *,
        policies: PolicyBook,
        fallback: HttpProvider | None = None,
        stop_requested: Callable[[], bool] = lambda: False,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.fallback = fallback
        self.policies = policies
        self.gate = gate
        self.policy = policy
        self.slot_wait_s = slot_wait_s  # a claimed row waits this long for a slot at most
        self.clock = clock
        self.rand = rand
        self.stop_requested = stop_requested  # no new call starts once it is True
        self.stopping = asyncio.Event()  # and storage retries give up once this is set
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
            metrics.observe_dead_letter("undecodable")
            return
        loaded = await self._durably(lambda: self.ledger.load(pointer["send_id"]))
        if loaded is None or loaded.view.dedupe_key != pointer["dedupe_key"]:
            log.warning("pointer to a missing row %s", pointer["send_id"])
            return
        row = loaded.view
        if row.status is not Status.PENDING or row.attempts != pointer["attempt"]:
            return  # a duplicate or stale pointer: the row moved on without it
        if await self._settled_without_call(loaded, origin):
            return
        attempt = await self._attempt(loaded, origin)
        if attempt is None:
            return
        row, decision = attempt.row, attempt.decision
        settled = await self._durably(
            lambda: self.ledger.settle_call(
                row, attempt.token, decision, origin, int(attempt.latency_s * 1000)
            )
        )
        metrics.observe_call(
            row.priority, decision.next_status.value, attempt.latency_s, attempt.status_code
        )
        if settled and decision.dead_letter:
            metrics.observe_dead_letter(dead_letter_reason(decision))
        if not settled:
            log.warning("lease on send %d was taken over before its outcome was recorded", row.id)

    async def _attempt(self, loaded: LoadedSend, origin: MessageOrigin) -> _Attempt | None:
        """Wait at the gate, claim, then call (and look up when the call leaves doubt) in an
        in-flight slot. The row is claimed before its slot comes, so the claim's round trip
        is not spent holding one; if no slot comes in time the claim is handed back.
        None if no call was made."""
        async with self.gate.claims:
            if self.stop_requested():
                raise Stopping()  # not started: left for redelivery
            row = loaded.view
            when_down = self.policies.for_template(row.template).when_provider_down
            route = self._route(row, when_down)
            admission = (
                None if route == FALLBACK else await self.gate.admit_send(when_down == "pause")
            )
            try:
                if admission is not None and await self._settled_without_call(loaded, origin):
                    return None  # it expired while the provider was down
                token = await self._durably(
                    lambda: self.ledger.claim_for_send(row.id, row.attempts, route)
                )
                if token is None:
                    return None  # someone else claimed it, or it is not due yet
                if not await self.gate.slots.acquire(timeout=self.slot_wait_s):
                    await self._durably(lambda: self.ledger.release_claim(row.id, token))
                    log.info("no in-flight slot for send %d in time: claim handed back", row.id)
                    return None  # calls are slow: the relay publishes it again
                try:
                    return await self._call(loaded, token, admission, route)
                finally:
                    self.gate.slots.release()
            finally:
                if admission is not None:
                    self.gate.release(admission)

    async def _settled_without_call(self, loaded: LoadedSend, origin: MessageOrigin) -> bool:
        """Expired, suppressed or invalid: settle it with no call and say so."""
        row = loaded.view
        verdict = before_send(row, self.clock(), loaded.suppressed)
        if verdict is None:
            return False
        if await self._durably(lambda: self.ledger.settle_gate(row, verdict, origin)):
            metrics.observe_call(row.priority, verdict.next_status.value, 0.0, None)
            if verdict.dead_letter:
                metrics.observe_dead_letter(dead_letter_reason(verdict))
        return True

    def _route(self, row: SendView, when_down: str) -> str | None:
        """The fallback provider only for mail whose policy allows it, while the primary's
        breaker is not closed, and only for a first attempt: a mail the primary may have
        taken is never offered to a second provider."""
        if (
            when_down == "fallback"
            and self.fallback is not None
            and row.attempts == 0
            and self.gate.breaker.state is not BreakerState.CLOSED
        ):
            return FALLBACK
        return None

    def _provider(self, route: str | None) -> HttpProvider:
        return self.fallback if route == FALLBACK and self.fallback is not None else self.provider

    async def resolve(self, loaded: LoadedSend, token: uuid.UUID) -> None:
        """Settle a row whose last call has no known outcome, by looking its key up."""
        decision = await self._decide_by_lookup(loaded.view, loaded.provider)
        await self._durably(lambda: self.ledger.settle_call(loaded.view, token, decision, None))

    async def _call(
        self,
        loaded: LoadedSend,
        token: uuid.UUID,
        admission: Admission | None,
        route: str | None,
    ) -> _Attempt:
        row = replace(loaded.view, status=Status.SENDING, attempts=loaded.view.attempts + 1)
        mail = OutgoingMail(row.dedupe_key, row.to_address, row.template, loaded.variables)
        log.debug("sending %s to %s, attempt %d", row.dedupe_key, row.to_address, row.attempts)
        started = time.monotonic()
        result = classify(await self._provider(route).send(mail))
        latency_s = time.monotonic() - started
        if admission is not None:
            self.gate.settle(admission, result, latency_s)
        decision = after_call(row, result, self.clock(), self.policy, self.rand)
        if decision.next_status is Status.UNKNOWN:
            decision = await self._decide_by_lookup(row, route)
        elif needs_confirmation(row, decision):
            found = await self._lookup(row.dedupe_key, route)
            if not found.failed:  # a failed look-up leaves the failure as decided
                decision = confirm_failure(decision, found.message_id)
        return _Attempt(row, token, decision, latency_s, result.status_code)

    async def _lookup(self, dedupe_key: str, route: str | None) -> LookupResult:
        """Ask the provider that took the call whether it accepted the key."""
        if route != FALLBACK:
            await self.gate.before_request()
        metrics.observe_lookup()
        return await self._provider(route).lookup(dedupe_key)

    async def _decide_by_lookup(self, row: SendView, route: str | None) -> Decision:
        found = await self._lookup(row.dedupe_key, route)
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
