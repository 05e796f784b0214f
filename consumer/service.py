"""Delivery of one send pointer: the core's decisions applied through the adapters.

    pointer → load row → route (the row's provider once tried) → gate verdict
    (expired / suppressed / cannot be encoded → settled, confirmed by look-up if the row
    was tried) | [provider gate → claim permit → guarded claim → in-flight slot →
    provider call → look-up?] → settle

A first attempt (the pointer's ``mailbus-first-attempt`` header, while the gate would let
it out at once) passes the gate on the pointer, then one statement loads and claims its
row (:meth:`DeliveryService._first_attempt`); a row it does not claim goes the way above.

Which provider takes a call is :class:`~mailbus.consumer.routing.Routing`'s; how a call
with no known outcome, or a final verdict on a row a provider may hold, is resolved is
:class:`~mailbus.consumer.doubt.Doubt`'s. Only the provider's part holds one of the
process's in-flight slots; loading and
settling, which the ledger batches, do not. A pointer is done when
:meth:`DeliveryService.handle` returns: its outcome is recorded in PostgreSQL (or there
was nothing to do), so its offset may be committed. Storage failures are retried until
they succeed or the service stops; a stop leaves the pointer undone (its offset
uncommitted) and a ``sending`` row for the reconciler to resolve. Every time decision is
made on the database's clock (:class:`~mailbus.consumer.db_clock.DatabaseClock`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core import (
    Decision,
    RetryPolicy,
    SendView,
    Status,
    TransportFailure,
    after_call,
    before_send,
    classify,
    unsendable,
    wait_for_provider,
)
from mailbus.consumer.core.breaker import BreakerPolicy
from mailbus.consumer.core.capability import (
    guarantee_of,
    key_conflict,
    resend_window_s,
    without_cover,
)
from mailbus.consumer.core.domains import deferred, recipient_domain
from mailbus.consumer.core.smtp_outcome import classify_call
from mailbus.consumer.core.suppression import stops
from mailbus.consumer.doubt import Doubt
from mailbus.consumer.gate import Admission, ProviderGate
from mailbus.consumer.ledger import (
    Claim,
    FirstClaim,
    LoadedSend,
    MessageOrigin,
    SendLedger,
    Unclaim,
    dead_letter_reason,
)
from mailbus.consumer.outcome_log import log_outcome
from mailbus.consumer.provider import OutgoingMail
from mailbus.consumer.routing import Routing
from mailbus.consumer.spans import CALL, call_span, process_span, settle_span
from mailbus.kernel import metrics, tracing
from mailbus.kernel.errors import CodecError, InvalidSendError, StorageError
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.schemas.codec import send_pointer_codec
from mailbus.schemas.registry import ValueCodec
from mailbus_client.policies import PolicyBook

__all__ = ["DeliveryService", "Stopping"]

log = logging.getLogger("mailbus.consumer")
_T = TypeVar("_T")


class Stopping(Exception):
    """The service is shutting down; the work in hand is abandoned, not recorded."""


class _Rerouted(Exception):
    """A first call that waited at one provider's breaker is now routed to the other
    (:meth:`~mailbus.consumer.routing.Routing.route`); nothing was claimed."""


@dataclass(frozen=True)
class _Attempt:
    """A call made under a lease, and what the core decided of it."""

    row: SendView
    token: uuid.UUID
    decision: Decision
    latency_s: float
    status_code: int | None


class DeliveryService:
    def __init__(
        self,
        ledger: SendLedger,
        provider: Provider,
        gate: ProviderGate,
        policy: RetryPolicy,
        slot_wait_s: float,
        *,
        policies: PolicyBook,
        fallback: Provider | None = None,
        stop_requested: Callable[[], bool] = lambda: False,
        clock: Callable[[], datetime] | None = None,
        rand: Callable[[], float] = random.random,
        codec: ValueCodec | None = None,
        attempt_warning: int = 3,
        provider_name: str | None = None,
        at_least_once: bool = False,
        reach_s: float = 0.0,
        settle_s: float | None = None,
        provider_kind: str = "http",
        fallback_kind: str = "http",
        fallback_gate: ProviderGate | None = None,
        tracer: Tracer = NOOP,
    ) -> None:
        self.ledger = ledger
        self.gate = gate
        # the fallback's own breaker and pauses (its refusals open it, not the primary's);
        # the process's in-flight slots and claim permits stay the primary gate's
        self.fallback_gate = fallback_gate or ProviderGate(
            1, BreakerPolicy(), None, lambda _state: None, lambda _limit: None
        )
        # MAILBUS_PROVIDER's kind (`sync:<kind>`, recorded by a first claim) and the fallback's
        self.routing = Routing(
            provider,
            provider_name,
            fallback,
            policies,
            gate,
            self.fallback_gate,
            fallback_kind,
            provider_kind,
        )
        self.policies = policies
        self.policy = policy
        self.slot_wait_s = slot_wait_s  # a claimed row waits this long for a slot at most
        self.clock = clock if clock is not None else ledger.clock.now  # the database's
        self.rand = rand
        self.stop_requested = stop_requested  # no new call starts once it is True
        self.stopping = asyncio.Event()  # and storage retries give up once this is set
        self._codec = codec or send_pointer_codec()  # MAILBUS_SCHEMA_REGISTRY_URL: the runner's
        self.attempt_warning = attempt_warning  # MAILBUS_ATTEMPT_WARNING
        self.at_least_once = at_least_once  # MAILBUS_UNKNOWN_OUTCOME=at_least_once
        self.reach_s = reach_s  # MAILBUS_KEY_WINDOW_MARGIN: a resend's margin before a key expires
        self.tracer = tracer  # MAILBUS_OTEL_EXPORTER: spans of claim, call, settle
        self.doubt = Doubt(
            self.routing,
            policy,
            self.clock,
            rand,
            at_least_once=at_least_once,
            reach_s=reach_s,
            settle_s=settle_s,  # MAILBUS_LOOKUP_SETTLE
        )

    async def handle(self, origin: MessageOrigin) -> None:
        """Deliver the mail one Kafka message points at; return once the outcome is recorded.
        One span, under the message's trace context, holds its claim, call and settle."""
        name, attributes = process_span(origin)
        with self.tracer.span(name, origin.trace, attributes, kind="consumer"):
            await self._deliver(origin)

    async def _deliver(self, origin: MessageOrigin) -> None:
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
        if origin.first_attempt is not None and self._gate_passes_at_once(origin.first_attempt):
            loaded = await self._first_attempt(pointer, origin.first_attempt, origin)
            if loaded is None:
                return  # seen through, or no such row
        else:
            loaded = await self._durably(lambda: self.ledger.load(pointer["send_id"]))
            if loaded is None or loaded.view.dedupe_key != pointer["dedupe_key"]:
                log.warning("pointer to a missing row %s", pointer["send_id"])
                return
        row = loaded.view
        if row.status is not Status.PENDING or row.attempts != pointer["attempt"]:
            return  # a duplicate or stale pointer: the row moved on without it
        while True:
            route = self.routing.route(loaded)
            verdict = self._verdict(loaded, route)
            if isinstance(verdict, Decision):
                await self._settle_without_call(loaded, verdict, origin)
                return
            try:
                attempt = await self._attempt(loaded, origin, route, verdict)
                break
            except _Rerouted:
                continue  # a first call that waited at one breaker: prepared for the other
        if attempt is not None:
            await self._settle_attempt(attempt, route, origin)

    def _gate_passes_at_once(self, template: str) -> bool:
        """Whether a never-claimed row of ``template`` is claimed as it is loaded
        (:meth:`_first_attempt`): only while its route's gate would let it out at once. While
        the breaker is not closed, a 429 pause runs or any recipient domain is paused, the
        row is read first, as before: an expired, suppressed or duplicate pointer is then
        settled or dropped at once instead of waiting at the gate, and a mail to a paused
        domain is deferred unclaimed (its domain is in its address, which only the row has)."""
        return self.routing.gate_for(self.routing.first_route(template)).passes_at_once()

    async def _first_attempt(
        self, pointer: dict[str, Any], template: str, origin: MessageOrigin
    ) -> LoadedSend | None:
        """A never-claimed row's first attempt with one statement before its call: the gate
        decides on the pointer (route, breaker, recovery, 429 pause, rate limit), then the
        row is loaded and claimed at once (docs/design.md, "Claimed as it is loaded"). A
        row the claim did not take is returned, to go the usual way; one found unfit for a
        call once read (its address or template cannot be sent, its domain started
        throttling) is settled and its claim undone in one statement. None: seen through."""
        token = uuid.uuid4()  # one token for every try: a claim whose reply was lost is ours
        route = self.routing.first_route(template)
        while True:
            try:
                done = await self._first_attempt_on(route, pointer, template, token, origin)
            except _Rerouted:
                route = self.routing.first_route(template)
                continue  # rerouted while it waited at the breaker; nothing was claimed
            if isinstance(done, _Attempt):
                await self._settle_attempt(done, route, origin)
                return None
            return done

    async def _first_attempt_on(
        self,
        route: str | None,
        pointer: dict[str, Any],
        template: str,
        token: uuid.UUID,
        origin: MessageOrigin,
    ) -> _Attempt | LoadedSend | None:
        """:meth:`_first_attempt` on one route: the call made, the row to go the usual way,
        or None (nothing more to do)."""
        gate, provider = self.routing.gate_for(route), self.routing.provider_for(route)
        assert provider is not None  # first_route names a provider of this process
        guarantee = guarantee_of(provider.capability, self.at_least_once).value

        async def claim_and_call(admission: Admission) -> _Attempt | LoadedSend | None:
            first = await self._claim_first(pointer, template, route, token, guarantee)
            if first is None:
                log.warning("pointer to a missing row %s", pointer["send_id"])
                return None
            if first.claim is None:
                return first.loaded
            loaded, undo = first.loaded, first.undo()
            try:
                mail = self._verdict(loaded, route)
            except Exception as exc:  # a bug, not the mail's: nothing was sent
                await self._undo_after_bug(loaded, undo, origin, exc)
                raise
            if isinstance(mail, Decision):
                await self._settle_without_call(loaded, mail, origin, undo)
                return None
            domain = recipient_domain(loaded.view.to_address)
            if await self._defer_for_domain(loaded, domain, origin, gate, undo):
                return None  # the domain began throttling since the pointer's check
            metrics.observe_guarantee(guarantee)
            return await self._call_in_slot(loaded, first.claim, admission, route, mail, origin)

        return await self._past_the_gate(
            gate,
            self.policies.for_template(template).when_provider_down == "pause",
            pointer["priority"] == "p0",
            lambda: self.routing.first_route(template) == route,
            claim_and_call,
        )

    async def _undo_after_bug(
        self, loaded: LoadedSend, undo: Unclaim | None, origin: MessageOrigin, exc: Exception
    ) -> None:
        """A first attempt whose verdict failed unexpectedly (an adapter's ``prepare`` that
        raised): left as if never claimed, as the usual path leaves it, to be published
        again after the retry policy's longest wait rather than at once."""
        retry_at = self.clock() + timedelta(seconds=self.policy.cap_s)
        reason = f"internal error: {type(exc).__name__}"
        later = Decision(Status.PENDING, retry_at=retry_at, reason=reason)
        await self._durably(lambda: self.ledger.settle_gate(loaded.view, later, origin, undo))

    async def _claim_first(
        self,
        pointer: dict[str, Any],
        template: str,
        route: str | None,
        token: uuid.UUID,
        guarantee: str,
    ) -> FirstClaim | None:
        send_id = pointer["send_id"]
        with self.tracer.span("mailbus.claim", attributes={"mailbus.send_id": send_id}) as span:
            first = await self._durably(
                lambda: self.ledger.claim_first_attempt(
                    send_id,
                    pointer["dedupe_key"],
                    template,
                    pointer["priority"],
                    route,
                    token,
                    provider_kind=self.routing.kind_for(route),
                    guarantee=guarantee,
                )
            )
            span.set("mailbus.claimed", first is not None and first.claim is not None)
        return first

    async def _settle_attempt(
        self, attempt: _Attempt, route: str | None, origin: MessageOrigin
    ) -> None:
        row, decision = attempt.row, attempt.decision
        name, attributes = settle_span(row, decision, origin)
        with self.tracer.span(name, attributes=attributes):
            settled = await self._durably(
                lambda: self.ledger.settle_call(
                    row, attempt.token, decision, origin, int(attempt.latency_s * 1000)
                )
            )
        metrics.observe_call(
            row.priority, decision.next_status.value, attempt.latency_s, attempt.status_code
        )
        if settled:
            self._recorded(row, decision, route, attempt.latency_s)
        if settled and decision.dead_letter:
            metrics.observe_dead_letter(dead_letter_reason(decision))
        if settled and row.attempts == self.attempt_warning and not decision.uncounted:
            metrics.observe_attempt_warning(row.priority)
        if not settled:
            log.warning("lease on send %d was taken over before its outcome was recorded", row.id)

    def _recorded(
        self, row: SendView, decision: Decision, provider: str | None, latency_s: float | None
    ) -> None:
        """An outcome was recorded: its log line, and an accepted mail's time since enqueue
        (on the database's clock), with the mail's trace as the exemplar."""
        log_outcome(row, decision, provider, latency_s)
        if decision.next_status is Status.ACCEPTED and row.created_at is not None:
            since = (self.clock() - row.created_at).total_seconds()
            metrics.observe_accepted(row.priority, since, tracing.current())

    def _suppressed(self, loaded: LoadedSend) -> bool:
        """Whether a suppression of its address stops this row: any for bulk mail, only a
        hard bounce's or a manual one (scope ``all``) for transactional mail."""
        policy = self.policies.for_template(loaded.view.template)
        return stops(loaded.suppression, loaded.campaign_id, policy.name)

    def _verdict(self, loaded: LoadedSend, route: str | None) -> Decision | Any:
        """What happens without a call (expired, suppressed, invalid, cannot be encoded,
        or its provider is not here), else the encoded request to send."""
        row = loaded.view
        now = self.clock()
        verdict = before_send(row, now, self._suppressed(loaded), self.policy.max_age_s)
        if verdict is not None:
            return verdict
        provider = self.routing.provider_for(route)
        if provider is None:
            return wait_for_provider(row, route or "default", now, self.policy)
        closed = self.doubt.gate_resend(row, provider, now)
        if closed is not None:
            return closed
        mail = OutgoingMail(row.key, row.to_address, row.template, loaded.variables)
        try:
            return provider.prepare(mail)
        except InvalidSendError as exc:
            return unsendable(exc.field, exc.problem)

    async def _settle_without_call(
        self,
        loaded: LoadedSend,
        verdict: Decision,
        origin: MessageOrigin | None,
        undo: Unclaim | None = None,
    ) -> None:
        """Record a decision taken with no call, on a row still ``pending`` (or claimed as it
        was loaded: ``undo``); a final one for a row that was tried stands only after a
        look-up at the provider that took it."""
        row = loaded.view
        taken_by = self.routing.taken_by(loaded)
        if self.doubt.must_confirm(verdict, row.attempts, row, taken_by):
            verdict = await self.doubt.confirm(row, verdict, taken_by)
        name, attributes = settle_span(row, verdict, origin)
        with self.tracer.span(name, attributes=attributes):
            settled = await self._durably(
                lambda: self.ledger.settle_gate(row, verdict, origin, undo)
            )
        if settled:
            metrics.observe_call(row.priority, verdict.next_status.value, 0.0, None)
            self._recorded(row, verdict, taken_by, None)
            if verdict.dead_letter:
                metrics.observe_dead_letter(dead_letter_reason(verdict))

    async def _attempt(
        self, loaded: LoadedSend, origin: MessageOrigin, route: str | None, mail: Any
    ) -> _Attempt | None:
        """Wait at the gate, then claim, then call (and look up when the call leaves doubt)
        in an in-flight slot (:meth:`_past_the_gate`). The row is claimed before its
        slot comes, so the claim's round trip is not spent holding one; if no slot comes in
        time, or the row would reach the provider after it expired, the claim is handed
        back. None if no call was made; :class:`_Rerouted` if the route changed while it
        waited at the breaker."""
        if self.stop_requested():
            raise Stopping()  # not started: left for redelivery
        row = loaded.view
        unhurried = self.policies.for_template(row.template).when_provider_down == "pause"
        token = uuid.uuid4()  # one token for every try: a claim whose reply was lost is ours
        domain = recipient_domain(row.to_address)
        gate = self.routing.gate_for(route)
        if await self._defer_for_domain(loaded, domain, origin, gate):
            return None

        async def claim_and_call(admission: Admission) -> _Attempt | None:
            if await self._defer_for_domain(loaded, domain, origin, gate):
                return None  # the domain throttled while this waited at the gate
            if expired := before_send(
                row, self.clock(), self._suppressed(loaded), self.policy.max_age_s
            ):
                await self._settle_without_call(loaded, expired, origin)
                return None  # it expired while the provider was down
            claim = await self._claim(row, route, token)
            if claim is None:
                await self._recheck(row.id, origin)  # e.g. it expired a moment ago
                return None
            return await self._call_in_slot(loaded, claim, admission, route, mail, origin)

        return await self._past_the_gate(
            gate,
            unhurried,
            row.priority == "p0",
            lambda: self.routing.route(loaded) == route,
            claim_and_call,
        )

    async def _past_the_gate(
        self,
        gate: ProviderGate,
        unhurried: bool,
        p0: bool,
        still: Callable[[], bool],
        step: Callable[[Admission], Awaitable[_T]],
    ) -> _T:
        """Wait at ``gate`` (:meth:`ProviderGate.admit_send`), then run ``step`` holding one
        of the process's claim permits, and again from the gate if its breaker opened while
        this waited for the permit. The gate is passed before a permit is taken, so mail
        waiting for a recovering provider never holds one. :class:`_Rerouted` if ``still()``
        turned False while it waited at the breaker."""
        while True:
            admission = await gate.admit_send(unhurried, p0=p0, still=still)
            if admission is None:
                raise _Rerouted()
            try:
                async with self.gate.claims:
                    if not gate.holds(admission):
                        continue  # the breaker opened while this waited for a permit
                    if self.stop_requested():
                        raise Stopping()
                    return await step(admission)
            finally:
                gate.release(admission)

    async def _claim(self, row: SendView, route: str | None, token: uuid.UUID) -> Claim | None:
        """The guarded claim, recording the guarantee the row is sent under; a row in doubt
        is claimed only inside its provider's resend window (checked on the database's
        clock, where the wait ends)."""
        provider = self.routing.provider_for(route)
        assert provider is not None  # _verdict prepared the mail with it
        capability = provider.capability
        guarantee = guarantee_of(capability, self.at_least_once).value
        window_s = resend_window_s(capability, self.at_least_once, self.reach_s)
        with self.tracer.span("mailbus.claim", attributes={"mailbus.send_id": row.id}) as span:
            claim = await self._durably(
                lambda: self.ledger.claim_for_send(
                    row.id,
                    row.attempts,
                    route,
                    token,
                    provider_kind=self.routing.kind_for(route),
                    guarantee=guarantee,
                    resend_window_s=window_s,
                    provider_key=row.key,
                )
            )
            span.set("mailbus.claimed", claim is not None)
        if claim is not None and row.attempts == 0:
            metrics.observe_guarantee(guarantee)
        return claim

    async def _defer_for_domain(
        self,
        loaded: LoadedSend,
        domain: str,
        origin: MessageOrigin,
        gate: ProviderGate,
        undo: Unclaim | None = None,
    ) -> bool:
        """A mail to a domain that is throttling us (at the provider of ``gate``) waits,
        pending, without a call (its claim undone, if it was claimed as it was loaded)."""
        left = gate.domain_pause(domain)
        if left <= 0:
            return False
        decision = deferred(domain, left, self.clock())
        await self._durably(lambda: self.ledger.settle_gate(loaded.view, decision, origin, undo))
        metrics.observe_domain_deferral(loaded.view.priority)
        return True

    async def _call_in_slot(
        self,
        loaded: LoadedSend,
        claim: Claim,
        admission: Admission,
        route: str | None,
        mail: Any,
        origin: MessageOrigin,
    ) -> _Attempt | None:
        row = loaded.view
        if not await self.gate.slots.acquire(timeout=self.slot_wait_s):
            await self._durably(lambda: self.ledger.release_claim(row.id, claim.token))
            log.info("no in-flight slot for send %d in time: claim handed back", row.id)
            return None  # calls are slow: the relay publishes it again
        try:
            if claim.send_by is not None and time.monotonic() >= claim.send_by:
                await self._durably(lambda: self.ledger.release_claim(row.id, claim.token))
                log.info("send %d expired or left its key's window for a slot: not sent", row.id)
                await self._recheck(row.id, origin)
                return None
            return await self._call(loaded, claim.token, admission, route, mail)
        finally:
            self.gate.slots.release()

    async def _recheck(self, send_id: int, origin: MessageOrigin) -> None:
        """A row this pointer could not claim: settle it if it needs no call any more."""
        fresh = await self._durably(lambda: self.ledger.load(send_id))
        if fresh is None or fresh.view.status is not Status.PENDING:
            return
        now = self.clock()
        verdict = before_send(fresh.view, now, self._suppressed(fresh), self.policy.max_age_s)
        if verdict is None:  # e.g. in doubt, and its key's window closed before the claim
            verdict = self.doubt.gate_resend(
                fresh.view, self.routing.provider_for(self.routing.route(fresh)), now
            )
        if verdict is not None:
            await self._settle_without_call(fresh, verdict, origin)

    async def resolve(self, loaded: LoadedSend, token: uuid.UUID) -> None:
        """Settle a row whose last call has no known outcome, by looking its key up."""
        taken_by = self.routing.taken_by(loaded)
        decision = await self.doubt.decide(loaded.view, taken_by)
        if await self._durably(lambda: self.ledger.settle_call(loaded.view, token, decision, None)):
            log_outcome(loaded.view, decision, taken_by, None)

    async def _call(
        self,
        loaded: LoadedSend,
        token: uuid.UUID,
        admission: Admission,
        route: str | None,
        mail: Any,
    ) -> _Attempt:
        view = loaded.view
        row = replace(
            view,
            status=Status.SENDING,
            attempts=view.attempts + 1,
            first_tried_at=view.first_tried_at or self.clock(),  # the claim's, near enough
        )
        provider = self.routing.provider_for(route)
        assert provider is not None  # _verdict prepared the mail with it
        log.debug("sending %s to %s, attempt %d", row.dedupe_key, row.to_address, row.attempts)
        called_at = self.clock()
        started = time.monotonic()
        name, attributes = call_span(row, route, mail)
        with self.tracer.span(name, attributes=attributes, kind="client") as span:
            try:
                sent = await provider.send(mail)  # an HTTP provider carries the span's traceparent
                result = without_cover(provider.capability, classify_call(sent))
            except Exception as exc:  # a bug, not an outage: the request may have left
                log.exception("send %d: the call failed unexpectedly", row.id)
                result = classify(TransportFailure(True, f"internal error: {type(exc).__name__}"))
            if result.status_code is not None:
                http = name != CALL
                span.set(
                    "http.response.status_code" if http else "mailbus.status_code",
                    result.status_code,
                )
        latency_s = time.monotonic() - started
        if result.server_stage is not None:
            log.warning("the provider's server failed (%s): %s", result.server_stage, result.reason)
            metrics.observe_server_failure(self.routing.label_for(route), result.server_stage)
        gate = self.routing.gate_for(route)
        gate.settle(admission, result, latency_s, recipient_domain(row.to_address))
        source = f"sync:{self.routing.kind_for(route)}"
        decision = after_call(row, result, self.clock(), self.policy, self.rand, source)
        # any earlier call (in doubt, or resolved --not-sent by an operator) may hold the key
        if view.attempts > 0 and key_conflict(provider.capability, result):
            decision = self.doubt.key_used(row, route, self.clock())
        elif decision.next_status is Status.UNKNOWN:
            row = replace(row, in_doubt_since=called_at)
            decision = await self.doubt.decide(row, route)
        elif self.doubt.must_confirm(decision, row.attempts - 1, row, route):
            decision = await self.doubt.confirm(row, decision, route)
        return _Attempt(row, token, decision, latency_s, result.status_code)

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
