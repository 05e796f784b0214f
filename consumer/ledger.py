"""PostgreSQL side of delivery: load, claim and settle ``email_sends`` rows.

Every state change is guarded (``… WHERE id = … AND status = … RETURNING``): a row not
returned is owned by someone else and the caller moves on. Dead letters are written in
the same statement as the ``failed`` status; the relay publishes them. The methods take
one row each, but concurrent calls are coalesced (:mod:`mailbus.kernel.coalescer`) into one
statement per batch, so a busy consumer pays a round trip per batch, not per row.
psycopg errors become :class:`StorageError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mailbus.consumer.core import Decision, SendView, Status
from mailbus.consumer.core.decide import MAX_AGE_REASON, SEND_HEADROOM_S
from mailbus.consumer.core.suppression import Scope
from mailbus.consumer.db_clock import DatabaseClock
from mailbus.kernel import schema_guard
from mailbus.kernel.coalescer import Coalescer
from mailbus.kernel.errors import StorageError
from mailbus.kernel.pooling import connect_options
from mailbus.kernel.provider_key import provider_key, row_provider_key
from mailbus.kernel.tracecontext import TraceContext
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "Claim",
    "FirstClaim",
    "LoadedSend",
    "MessageOrigin",
    "SendLedger",
    "Unclaim",
    "dead_letter_reason",
]

_T = TypeVar("_T")


@dataclass(frozen=True)
class LoadedSend:
    view: SendView
    variables: dict[str, Any]
    suppression: Scope | None  # the widest suppression of its address; None: none
    provider: str | None  # who took the latest call; None = the primary
    campaign_id: int | None = None  # set for a campaign's rows (bulk mail)
    provider_kind: str | None = None  # its first claim's provider's kind; None: before 0071


@dataclass(frozen=True)
class MessageOrigin:
    """Where a Kafka message came from, for dead letters, and the trace it continues."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None
    trace: TraceContext | None = None  # its traceparent header (docs/guides/tracing.md)
    # its row's template, when the relay said the row was never claimed (pointer_headers)
    first_attempt: str | None = None


@dataclass(frozen=True)
class Claim:
    """A claimed row: its lease token, and the monotonic time by which its call must start
    (``SEND_HEADROOM_S`` before the row's expiry and, for a row in doubt, before its
    resend window ends, on this process's clock; None: never)."""

    token: uuid.UUID
    send_by: float | None


@dataclass(frozen=True)
class _ClaimRequest:
    send_id: int
    attempt: int
    token: uuid.UUID
    provider: str | None
    provider_kind: str | None
    submitted: float  # monotonic, before the statement ran: the deadline errs early
    guarantee: str | None
    resend_window_s: float | None
    provider_key: str | None


@dataclass(frozen=True)
class Unclaim:
    """Undo a :meth:`SendLedger.claim_first_attempt` claim as its decision is recorded: the
    row is left as if never claimed, with the guarantee it had before."""

    token: uuid.UUID
    guarantee_before: str | None


@dataclass(frozen=True)
class FirstClaim:
    """A pointer's row, loaded as it was before :meth:`SendLedger.claim_first_attempt`
    claimed it (``claim``), or did not (None: it goes the usual way, from ``loaded``)."""

    loaded: LoadedSend
    claim: Claim | None
    guarantee_before: str | None

    def undo(self) -> Unclaim:
        """How a decision taken with no call undoes the claim."""
        assert self.claim is not None
        return Unclaim(self.claim.token, self.guarantee_before)


@dataclass(frozen=True)
class _FirstClaimRequest:
    send_id: int
    dedupe_key: str
    template: str
    priority: str
    token: uuid.UUID
    provider: str | None
    provider_kind: str
    guarantee: str
    submitted: float  # monotonic, before the statement ran: the deadline errs early


@dataclass(frozen=True)
class _Settlement:
    send: SendView
    token: uuid.UUID | None
    decision: Decision
    origin: MessageOrigin | None
    latency_ms: int | None
    unclaim: Unclaim | None = None


class SendLedger:
    def __init__(
        self,
        database_url: str,
        max_connections: int,
        lease_s: float,
        max_age_s: float | None = None,
        key_prefix: str = "",
        transaction_pooling: bool = False,
    ) -> None:
        self._pool = AsyncConnectionPool(
            database_url,
            min_size=1,
            max_size=max_connections,
            open=False,
            kwargs={
                "autocommit": True,
                "connect_timeout": 5,
                **connect_options(transaction_pooling),
            },
            configure=schema_guard.check_async,  # a database restored behind the build
            reconnect_timeout=3600,
        )
        self._queries = {
            **load_queries("mailbus.consumer", "queries.sql"),
            **load_queries("mailbus.consumer", "protection.sql"),  # report_health
        }
        self._lease_s = lease_s
        self._max_age_s = max_age_s  # MAILBUS_MAX_AGE: the claim refuses a retry past it
        self._key_prefix = key_prefix  # MAILBUS_PROVIDER_KEY_PREFIX, before every provider key
        self.clock = DatabaseClock()  # advanced from every load's clock_timestamp()
        self._loads = Coalescer(self._load_batch)
        self._claims = Coalescer(self._claim_batch)
        self._first_claims = Coalescer(self._first_claim_batch)
        self._settlements = Coalescer(self._settle_batch)

    async def open(self) -> None:
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    async def load(self, send_id: int) -> LoadedSend | None:
        return await self._loads.submit(send_id)

    async def claim_for_send(
        self,
        send_id: int,
        attempt: int,
        provider: str | None,
        token: uuid.UUID,
        *,
        provider_kind: str | None = None,
        guarantee: str | None = None,
        resend_window_s: float | None = None,
        provider_key: str | None = None,
    ) -> Claim | None:
        """pending → sending for the attempt the pointer names, under ``token``; None if
        the row is not ours to send (claimed elsewhere, not due, expired, tried at another
        provider, of a paused or cancelled campaign, or in doubt past ``resend_window_s`` of
        its first call). Claiming again with the same token (a retry after a lost reply)
        returns the claim again without counting another attempt. ``guarantee`` is recorded
        on the row, and ``provider_key`` (the key the call carries) unless one already is;
        ``provider_kind`` (the kind of ``provider`` here) at a first claim, and a retry
        claimed for another kind than the recorded one is refused."""
        request = _ClaimRequest(
            send_id,
            attempt,
            token,
            provider,
            provider_kind,
            time.monotonic(),
            guarantee,
            resend_window_s,
            provider_key,
        )
        return await self._claims.submit(request)

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
        """Load a row a pointer says was never claimed and, in the same statement, claim its
        first attempt under ``token`` for ``provider`` (recording its kind, ``guarantee``
        and its key) if it is sendable without a look at it first and of the ``template``
        and ``priority`` its gate decided on (consumer/queries.sql, claim_first_attempt).
        None: no row of that id and ``dedupe_key``."""
        request = _FirstClaimRequest(
            send_id,
            dedupe_key,
            template,
            priority,
            token,
            provider,
            provider_kind,
            guarantee,
            time.monotonic(),
        )
        return await self._first_claims.submit(request)

    async def release_claim(self, send_id: int, token: uuid.UUID) -> None:
        """Undo a claim whose call never started: back to ``pending`` at the same attempt,
        for the relay to publish again."""
        await self._run("release_claim", {"id": send_id, "token": token})

    async def settle_gate(
        self,
        send: SendView,
        decision: Decision,
        origin: MessageOrigin | None,
        unclaim: Unclaim | None = None,
    ) -> bool:
        """Record a decision taken before any call, on a row still ``pending``, or on one
        :meth:`claim_first_attempt` claimed, whose claim ``unclaim`` undoes (``send``: the
        row as it was loaded, before the claim)."""
        token = None if unclaim is None else unclaim.token
        settlement = _Settlement(send, token, decision, origin, None, unclaim)
        return await self._settlements.submit(settlement)

    async def settle_call(
        self,
        send: SendView,
        token: uuid.UUID,
        decision: Decision,
        origin: MessageOrigin | None,
        latency_ms: int | None = None,
    ) -> bool:
        """Record the outcome of the lease holder's call (``latency_ms`` set) or look-up.
        False if the lease was taken over meanwhile."""
        settlement = _Settlement(send, token, decision, origin, latency_ms)
        return await self._settlements.submit(settlement)

    async def record_undecodable(self, origin: MessageOrigin, error: str) -> None:
        params = {
            "error": error[:500],
            "topic": origin.topic,
            "partition": origin.partition,
            "offset": origin.offset,
            "key": origin.key,
            "value": origin.value,
        }
        await self._run("insert_dead_letter", params)

    async def take_unresolved(
        self, priorities: Sequence[str], limit: int
    ) -> list[tuple[LoadedSend, uuid.UUID]]:
        """Take (with a fresh lease) rows of ``priorities`` whose last call has no known
        outcome."""
        token = uuid.uuid4()
        params = {
            "priorities": list(priorities),
            "lease_s": self._lease_s,
            "limit": limit,
            "token": token,
        }
        return [(self._loaded(row), token) for row in await self._run("take_unresolved", params)]

    async def republish_stale(
        self, priorities: Sequence[str], after_s: float, limit: int = 1000
    ) -> int:
        params = {"priorities": list(priorities), "after_s": after_s, "limit": limit}
        return len(await self._run("republish_stale", params))

    async def report_health(self, process: str, provider: str, state: str) -> None:
        """Publish this process's breaker state for `mailbus status` (best effort)."""
        params = {"process": process, "provider": provider, "state": state}
        await self._run("report_health", params)

    async def _load_batch(self, send_ids: Sequence[int]) -> list[LoadedSend | None]:
        rows = await self._run("load_sends", {"ids": list(send_ids)})
        loaded = {send.view.id: send for send in map(self._loaded, rows)}
        return [loaded.get(send_id) for send_id in send_ids]

    async def _claim_batch(self, claims: Sequence[_ClaimRequest]) -> list[Claim | None]:
        won: dict[uuid.UUID, Claim] = {}
        for claims_of_round in _distinct_rounds(claims, lambda claim: claim.send_id):
            rows = [
                {
                    "id": c.send_id,
                    "attempt": c.attempt,
                    "token": str(c.token),
                    "provider": c.provider,
                    "provider_kind": c.provider_kind,
                    "guarantee": c.guarantee,
                    "resend_window_s": c.resend_window_s,
                    "provider_key": c.provider_key,
                }
                for c in claims_of_round
            ]
            params = {
                "claims": Jsonb(rows),
                "lease_s": self._lease_s,
                "max_age_s": self._max_age_s,
                "headroom_s": SEND_HEADROOM_S,
            }
            returned = await self._run("claim_for_send", params)
            left = {send_id: (expiry, window) for send_id, expiry, window in returned}  # seconds
            for c in claims_of_round:
                if c.send_id in left:
                    expiry, window = left[c.send_id]
                    deadlines = [c.submitted + window] if window is not None else []
                    if expiry is not None:
                        deadlines.append(c.submitted + expiry - SEND_HEADROOM_S)
                    won[c.token] = Claim(c.token, min(deadlines, default=None))
        return [won.get(claim.token) for claim in claims]

    async def _first_claim_batch(
        self, requests: Sequence[_FirstClaimRequest]
    ) -> list[FirstClaim | None]:
        found: dict[uuid.UUID, FirstClaim] = {}
        for round_ in _distinct_rounds(requests, lambda request: request.send_id):
            rows = [
                {
                    "id": r.send_id,
                    "dedupe_key": r.dedupe_key,
                    "template": r.template,
                    "priority": r.priority,
                    "token": str(r.token),
                    "provider": r.provider,
                    "provider_kind": r.provider_kind,
                    "guarantee": r.guarantee,
                    "provider_key": provider_key(self._key_prefix, r.dedupe_key, 1),
                }
                for r in round_
            ]
            params = {
                "claims": Jsonb(rows),
                "lease_s": self._lease_s,
                "headroom_s": SEND_HEADROOM_S,
            }
            returned = {row[0]: row for row in await self._run("claim_first_attempt", params)}
            for r in round_:
                row = returned.get(r.send_id)
                if row is None:
                    continue
                *loaded, guarantee_before, claimed, left_s = row
                claim = None
                if claimed:
                    send_by = None if left_s is None else r.submitted + left_s - SEND_HEADROOM_S
                    claim = Claim(r.token, send_by)
                found[r.token] = FirstClaim(self._loaded(tuple(loaded)), claim, guarantee_before)
        return [found.get(request.token) for request in requests]

    async def _settle_batch(self, settlements: Sequence[_Settlement]) -> list[bool]:
        recorded: set[int] = set()  # id() of the settlements whose guard held
        for settlements_of_round in _distinct_rounds(settlements, lambda s: s.send.id):
            params = {"decisions": Jsonb([_settle_row(s) for s in settlements_of_round])}
            done = {send_id for (send_id,) in await self._run("settle", params)}
            recorded.update(id(s) for s in settlements_of_round if s.send.id in done)
        return [id(settlement) in recorded for settlement in settlements]

    def _loaded(self, row: tuple[Any, ...]) -> LoadedSend:
        """A ``load_sends``/``take_unresolved`` row; its trailing ``clock_timestamp()``
        advances :attr:`clock`."""
        (
            send_id,
            key,
            to,
            template,
            payload,
            priority,
            status,
            attempts,
            expires,
            next_try,
            in_doubt_since,
            provider,
            created_at,
            first_tried_at,
            sent_key,
            life,
            suppression,
            campaign_id,
            provider_kind,
            database_now,
        ) = row
        self.clock.observe(database_now)
        view = SendView(
            send_id,
            key,
            to,
            template,
            priority,
            Status(status),
            attempts,
            expires,
            next_try,
            in_doubt_since,
            created_at,
            first_tried_at,
            row_provider_key(self._key_prefix, key, life, sent_key, attempts),
        )
        variables = payload if isinstance(payload, dict) else {}
        return LoadedSend(view, variables, suppression, provider, campaign_id, provider_kind)

    async def _run(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a named query on a pooled connection; its rows (none without RETURNING)."""
        try:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(self._queries[query], params)
                return await cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            raise StorageError(f"{query} failed: {exc}") from exc


def dead_letter_reason(decision: Decision) -> str:
    """The dead letter's ``reason``: rejected, max_attempts, max_age or invalid."""
    if decision.reason.startswith("gave up"):
        return "max_attempts"
    if decision.reason.startswith(MAX_AGE_REASON):
        return "max_age"
    if decision.provider_code is not None:
        return "rejected"
    return "invalid"


def _distinct_rounds(items: Sequence[_T], key: Callable[[_T], int]) -> list[list[_T]]:
    """Split a batch so no row is named twice in one statement (an UPDATE … FROM applies
    only one of two input rows for the same target row); almost always one round."""
    rounds: list[tuple[list[_T], set[int]]] = []
    for item in items:
        k = key(item)
        for members, keys in rounds:
            if k not in keys:
                members.append(item)
                keys.add(k)
                break
        else:
            rounds.append(([item], {k}))
    return [members for members, _ in rounds]


def _settle_row(settlement: _Settlement) -> dict[str, Any]:
    """One element of the ``settle`` statement's JSON array (its column names)."""
    decision, origin = settlement.decision, settlement.origin
    return {
        "id": settlement.send.id,
        "attempt": settlement.send.attempts,
        "token": None if settlement.token is None else str(settlement.token),
        "status": decision.next_status.value,
        "next_try_at": _iso(decision.retry_at),
        "in_doubt_since": _iso(settlement.send.in_doubt_since),
        "last_error": decision.reason or None,
        "message_id": decision.message_id,
        "latency_ms": settlement.latency_ms,
        "status_code": decision.status_code,
        "provider_code": decision.provider_code,
        "dead_letter": decision.dead_letter,
        "dl_reason": dead_letter_reason(decision),
        "dl_error": decision.reason[:500],
        "topic": origin.topic if origin else None,
        "kafka_partition": origin.partition if origin else None,
        "kafka_offset": origin.offset if origin else None,
        "uncounted": decision.uncounted,
        "suppress_source": decision.suppress_source,
        "unclaim": settlement.unclaim is not None,
        "guarantee": None if settlement.unclaim is None else settlement.unclaim.guarantee_before,
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
