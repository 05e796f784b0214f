"""Randomized interleavings of the real DeliveryService and Reconciler: slow acceptances,
lost replies, duplicate pointers, expiring codes and killed deliveries, on an in-memory
ledger that applies the SQL's guards. Every run ends with the invariant of the e2e tests:
the table agrees with what the provider accepted.

The ledger here is a model of consumer/queries.sql (each guard of the claim and the
settle); the real statements are proven against PostgreSQL in tests/integration.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mailbus.consumer.core import Decision, RetryPolicy, SendView, Status
from mailbus.consumer.core.breaker import BreakerPolicy
from mailbus.consumer.core.decide import SEND_HEADROOM_S
from mailbus.consumer.core.outcome import CallResult, ProviderReply, TransportFailure
from mailbus.consumer.db_clock import DatabaseClock
from mailbus.consumer.gate import ProviderGate
from mailbus.consumer.http_wire import HttpCall
from mailbus.consumer.ledger import Claim, FirstClaim, LoadedSend, MessageOrigin, Unclaim
from mailbus.consumer.provider import LookupResult, MailbusDialect, OutgoingMail, PreparedMail
from mailbus.consumer.reconciler import Reconciler
from mailbus.consumer.service import DeliveryService
from mailbus.schemas.codec import SendPointer, send_pointer_codec
from mailbus_client.policies import configured_policy_book

LEASE_S = 0.4
TIMEOUT_S = 0.05  # the client gives up on a call after this
SLOWEST_ACCEPT_S = 0.15  # a slow provider accepts at most this long after the request


@dataclass
class _Row:
    view: SendView
    token: uuid.UUID | None = None
    lease_until: datetime | None = None
    provider: str | None = None
    message_id: str | None = None
    claimed_once: bool = False  # first_tried_at set


class ModelLedger:
    """The guards of consumer/queries.sql over a dict."""

    def __init__(self, rows: list[SendView]) -> None:
        self.clock = DatabaseClock()
        self.rows = {view.id: _Row(view) for view in rows}

    def now(self) -> datetime:
        return self.clock.now()

    async def load(self, send_id: int) -> LoadedSend | None:
        row = self.rows.get(send_id)
        return None if row is None else LoadedSend(row.view, {}, None, row.provider)

    async def claim_for_send(
        self,
        send_id: int,
        attempt: int,
        provider: str | None,
        token: uuid.UUID,
        *,
        provider_kind: str | None = None,  # the model's one provider: one kind
        guarantee: str | None = None,
        resend_window_s: float | None = None,  # None: the model's provider has a look-up
        provider_key: str | None = None,
    ) -> Claim | None:
        submitted = asyncio.get_running_loop().time()  # as the real ledger: errs early
        row, now = self.rows[send_id], self.now()
        view = row.view
        fresh = (
            view.status is Status.PENDING
            and view.attempts == attempt
            and (view.next_try_at is None or view.next_try_at <= now)
            and (
                view.expires_at is None
                or view.expires_at > now + timedelta(seconds=SEND_HEADROOM_S)
            )
            and (view.attempts == 0 or row.provider == provider)
        )
        if not fresh and not (view.status is Status.SENDING and row.token == token):
            return None
        if fresh:
            row.view = replace(view, status=Status.SENDING, attempts=view.attempts + 1)
        row.token, row.provider, row.claimed_once = token, provider, True
        row.lease_until = now + timedelta(seconds=LEASE_S)
        left = None if view.expires_at is None else (view.expires_at - now).total_seconds()
        return Claim(token, None if left is None else submitted + left - SEND_HEADROOM_S)

    async def claim_first_attempt(
        self,
        send_id: int,
        dedupe_key: str,
        template: str,
        priority: str,
        provider: str | None,
        token: uuid.UUID,
        *,
        provider_kind: str,
        guarantee: str,
    ) -> FirstClaim | None:
        row = self.rows.get(send_id)
        if row is None or row.view.dedupe_key != dedupe_key:
            return None
        assert (template, priority) == (row.view.template, row.view.priority)
        if row.view.status is Status.SENDING and row.token == token:  # a lost reply's retry
            never = replace(row.view, status=Status.PENDING, attempts=0)
            before = LoadedSend(never, {}, None, None)
        elif row.view.attempts == 0 and not row.claimed_once:
            before = LoadedSend(row.view, {}, None, row.provider)
        else:
            return FirstClaim(LoadedSend(row.view, {}, None, row.provider), None, None)
        claim = await self.claim_for_send(send_id, 0, provider, token)
        return FirstClaim(before, claim, None)

    async def release_claim(self, send_id: int, token: uuid.UUID) -> None:
        row = self.rows[send_id]
        if row.view.status is Status.SENDING and row.token == token:
            row.view = replace(row.view, status=Status.PENDING, attempts=row.view.attempts - 1)
            row.token = row.lease_until = None

    async def settle_gate(
        self, send: SendView, decision: Decision, _origin: Any, unclaim: Unclaim | None = None
    ) -> bool:
        row = self.rows[send.id]
        if unclaim is not None:
            if row.view.status is not Status.SENDING or row.token != unclaim.token:
                return False
            row.view = replace(row.view, attempts=row.view.attempts - 1)
            row.provider, row.claimed_once = None, False
        elif row.view.status is not Status.PENDING or row.view.attempts != send.attempts:
            return False
        self._apply(row, send, decision)
        return True

    async def settle_call(
        self, send: SendView, token: uuid.UUID, decision: Decision, _o: Any, _ms: Any = None
    ) -> bool:
        row = self.rows[send.id]
        if row.view.status is not Status.SENDING or row.token != token:
            return False
        self._apply(row, send, decision)
        return True

    async def take_unresolved(self, _p: Any, limit: int) -> list[tuple[LoadedSend, uuid.UUID]]:
        now, taken = self.now(), []
        for row in self.rows.values():
            view, lapsed = row.view, row.lease_until is not None and row.lease_until < now
            due = view.next_try_at is None or view.next_try_at <= now
            if (view.status is Status.SENDING and lapsed) or (
                view.status is Status.UNKNOWN and due
            ):
                doubt = view.in_doubt_since
                if view.status is Status.SENDING:
                    assert row.lease_until is not None
                    doubt = row.lease_until if doubt is None else max(doubt, row.lease_until)
                row.view = replace(view, status=Status.SENDING, in_doubt_since=doubt)
                row.token, row.lease_until = uuid.uuid4(), now + timedelta(seconds=LEASE_S)
                taken.append((LoadedSend(row.view, {}, None, row.provider), row.token))
        return taken[:limit]

    async def republish_stale(self, _p: Any, _after_s: float) -> int:
        return 0

    async def record_undecodable(self, _origin: Any, _error: str) -> None:
        raise AssertionError("no undecodable message here")

    @staticmethod
    def _apply(row: _Row, send: SendView, decision: Decision) -> None:
        doubt = [t for t in (row.view.in_doubt_since, send.in_doubt_since) if t is not None]
        row.view = replace(
            row.view,
            status=decision.next_status,
            next_try_at=decision.retry_at,
            in_doubt_since=max(doubt) if doubt else None,
        )
        row.message_id = decision.message_id or row.message_id
        row.token = row.lease_until = None


class FlakyProvider:
    """An honest idempotent provider behind a flaky network, as the sandbox is."""

    capability = MailbusDialect.capability

    def __init__(self, rng: random.Random, ledger: ModelLedger) -> None:
        self.rng, self.ledger = rng, ledger
        self.accepted: dict[str, str] = {}
        self.late_requests: list[str] = []  # arrived after the mail's expiry
        self._background: set[asyncio.Task[None]] = set()

    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        return PreparedMail(mail.key, HttpCall("POST", "http://provider/v1/send", {}))

    async def send(self, mail: PreparedMail) -> CallResult:
        key = mail.key
        expires = next(
            r.view.expires_at for r in self.ledger.rows.values() if r.view.dedupe_key == key
        )
        if expires is not None and self.ledger.now() >= expires:
            self.late_requests.append(key)
        fate = self.rng.random()
        if fate < 0.15:
            return ProviderReply(503)
        if fate < 0.30:  # accepted after the client gave up
            deadline = asyncio.get_running_loop().time() + SLOWEST_ACCEPT_S
            task = asyncio.create_task(
                self._accept_later(key, self.rng.uniform(0.06, SLOWEST_ACCEPT_S), deadline)
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            await asyncio.sleep(TIMEOUT_S)
            return TransportFailure(True, "read timeout")
        await asyncio.sleep(self.rng.uniform(0, 0.01))
        message_id = self._accept(key)
        if fate < 0.40:
            return TransportFailure(True, "connection lost after the request")
        return ProviderReply(200, message_id)

    async def lookup(self, key: str) -> LookupResult:
        if self.rng.random() < 0.1:
            return LookupResult(None, True, "http 502")
        return LookupResult(self.accepted.get(key), False)

    async def aclose(self) -> None:
        for task in self._background:
            task.cancel()

    def _accept(self, key: str) -> str:
        return self.accepted.setdefault(key, f"msg-{key}")

    async def _accept_later(self, key: str, delay: float, deadline: float) -> None:
        await asyncio.sleep(delay)
        # Its promise, which late_accept_s rests on: never later than SLOWEST_ACCEPT_S after
        # the request. On a loaded machine the sleep alone may overrun it; then it refuses.
        if asyncio.get_running_loop().time() <= deadline:
            self._accept(key)


def _service(
    ledger: ModelLedger, provider: Any, rng: random.Random, late_accept_s: float
) -> DeliveryService:
    gate = ProviderGate(
        8, BreakerPolicy(failure_threshold=10**6), None, lambda _s: None, lambda _l: None
    )
    policy = RetryPolicy(max_attempts=6, base_s=0.02, cap_s=0.1, late_accept_s=late_accept_s)
    return DeliveryService(
        ledger,  # type: ignore[arg-type]
        provider,
        gate,
        policy,
        slot_wait_s=0.05,
        policies=configured_policy_book({}),
        rand=rng.random,
    )


async def _run(seed: int, late_accept_s: float) -> tuple[ModelLedger, FlakyProvider]:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    views = [
        SendView(
            n,
            f"k-{n}",
            "ana@example.com",
            "password_reset" if n % 3 == 0 else "order_confirmation",
            "p1",
            Status.PENDING,
            0,
            expires_at=start + timedelta(seconds=rng.uniform(0.02, 0.3)) if n % 3 == 0 else None,
        )
        for n in range(1, 41)
    ]
    ledger = ModelLedger(views)
    ledger.clock.observe(start)
    provider = FlakyProvider(rng, ledger)
    service = _service(ledger, provider, rng, late_accept_s)
    reconciler = Reconciler(service, ["p1"], service.gate.slots, interval_s=0.02)
    reconciling = asyncio.create_task(reconciler.run())
    codec = send_pointer_codec()
    deliveries: set[asyncio.Task[None]] = set()
    for _ in range(2000):  # the relay: pointers for pending rows that are due, some twice
        if all(
            r.view.status in {Status.ACCEPTED, Status.FAILED, Status.EXPIRED}
            for r in ledger.rows.values()
        ):
            break
        for row in ledger.rows.values():
            view = row.view
            due = view.next_try_at is None or view.next_try_at <= ledger.now()
            if view.status is Status.PENDING and due and rng.random() < 0.5:
                pointer = SendPointer.of(view.id, view.dedupe_key, "p1", view.attempts, start)
                never_claimed = view.attempts == 0 and not row.claimed_once
                origin = MessageOrigin(
                    "mailbus.send.p1",
                    0,
                    0,
                    None,
                    codec.encode(pointer),
                    None,
                    view.template if never_claimed else None,  # the relay's header
                )
                for _copy in range(rng.choice((1, 1, 2))):
                    task = asyncio.create_task(service.handle(origin))
                    deliveries.add(task)
                    task.add_done_callback(deliveries.discard)
        if deliveries and rng.random() < 0.05:  # a consumer dies mid-delivery
            rng.choice(sorted(deliveries, key=id)).cancel()
        await asyncio.sleep(0.01)
    service.stopping.set()
    for task in list(deliveries):
        task.cancel()
    await asyncio.gather(*deliveries, reconciling, return_exceptions=True)
    await asyncio.sleep(SLOWEST_ACCEPT_S)  # the provider finishes what it took
    await provider.aclose()
    return ledger, provider


@pytest.mark.parametrize("seed", range(6))
def test_the_table_agrees_with_the_provider_under_random_interleavings(seed: int) -> None:
    ledger, provider = asyncio.run(_run(seed, late_accept_s=2 * SLOWEST_ACCEPT_S))
    statuses = {row.view.status for row in ledger.rows.values()}
    assert statuses <= {Status.ACCEPTED, Status.FAILED, Status.EXPIRED}, statuses
    table = {
        r.view.dedupe_key: r.message_id
        for r in ledger.rows.values()
        if r.view.status is Status.ACCEPTED
    }
    assert table == provider.accepted
    assert provider.late_requests == []  # nothing reached the provider after its expiry


def test_without_the_late_acceptance_window_the_table_can_disagree() -> None:
    # The same runs with the window at 0: a 404 right after a timeout is believed, and a
    # code the provider accepts a moment later ends expired or failed. This shows the
    # check above can fail, and what the window is for. About one seed in three shows it
    # (13 of 40 on a quiet machine), so the seeds run until one does.
    for seed in range(40):
        ledger, provider = asyncio.run(_run(seed, late_accept_s=0.0))
        table = {
            r.view.dedupe_key for r in ledger.rows.values() if r.view.status is Status.ACCEPTED
        }
        if set(provider.accepted) - table:
            return
    pytest.fail("40 runs without the window, and the table agreed with the provider in each")


class DistantProvider:
    """Accepts every request, which reaches it ``travel_s`` after the call starts."""

    capability = MailbusDialect.capability

    def __init__(self, ledger: ModelLedger, travel_s: float) -> None:
        self.ledger, self.travel_s = ledger, travel_s
        self.arrived_at: dict[str, datetime] = {}

    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        return PreparedMail(mail.key, HttpCall("POST", "http://provider/v1/send", {}))

    async def send(self, mail: PreparedMail) -> CallResult:
        await asyncio.sleep(self.travel_s)
        self.arrived_at[mail.key] = self.ledger.now()
        return ProviderReply(200, f"msg-{mail.key}")


def test_a_call_that_could_reach_the_provider_after_the_expiry_is_not_made() -> None:
    # A request is on its way for a while after the expiry check: a mail with less time
    # left than SEND_HEADROOM_S is expired, not sent, so no request arrives too late.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    left_s = {1: 0.01, 2: 1.0, 3: None}  # seconds before it expires

    async def deliver_all() -> tuple[ModelLedger, DistantProvider]:
        views = [
            SendView(
                n,
                f"k-{n}",
                "ana@example.com",
                "password_reset",
                "p0",
                Status.PENDING,
                0,
                expires_at=None if left is None else start + timedelta(seconds=left),
            )
            for n, left in left_s.items()
        ]
        ledger = ModelLedger(views)
        ledger.clock.observe(start)
        provider = DistantProvider(ledger, travel_s=0.025)
        service = _service(ledger, provider, random.Random(0), 2 * SLOWEST_ACCEPT_S)
        codec = send_pointer_codec()
        for view in views:
            pointer = SendPointer.of(view.id, view.dedupe_key, "p0", 0, start)
            await service.handle(
                MessageOrigin("mailbus.send.p0", 0, 0, None, codec.encode(pointer))
            )
        return ledger, provider

    ledger, provider = asyncio.run(deliver_all())
    statuses = {row.view.dedupe_key: row.view.status for row in ledger.rows.values()}
    assert statuses == {"k-1": Status.EXPIRED, "k-2": Status.ACCEPTED, "k-3": Status.ACCEPTED}
    for key, arrived in provider.arrived_at.items():
        expires = ledger.rows[int(key[2:])].view.expires_at
        assert expires is None or arrived < expires, key
