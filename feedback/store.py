"""PostgreSQL side of delivery events: concurrent events recorded in one statement per
batch (``feedback/events.sql``, ``record_events``).

Requests arriving while a batch runs are coalesced into the next one (group commit,
:class:`mailbus.kernel.coalescer.Coalescer`), so a busy receiver pays one round trip and one
commit per batch, not per event, and a quiet one runs each event alone at once. The
statement stores each event once per (provider, event id) and, only for the new ones,
updates the sends with their ``message_id`` (guarded by ``last_event_at``: an older event
arriving late does not overwrite a newer one) and suppresses their addresses after a hard
bounce or a complaint. A repeat of an event id within one batch is answered as a
duplicate without reaching the statement, exactly as if it had come a moment later.

An event matches only the sends of its provider (``events.sql``): ``sent_through`` is the
named provider the default provider's sends (``email_sends.provider`` NULL) went through,
``MAILBUS_PROVIDER``; a fallback's sends (``fallback:<kind>``) went through the kind they
record, and ``fallback_through`` is the one the sends recorded before the kind was
(``fallback``) went through, ``MAILBUS_FALLBACK_PROVIDER``; None when it names none.

A send a provider without a key or a look-up left ``unknown`` (or ``pending`` after a
call) is settled by that provider's own event when the event carries the send's dedupe key
and proves the provider took the mail (``settle_from_events``: ``accepted`` with the
event's message id, counted in :attr:`Recorded.settled`), just before the batch is
recorded. Such an event is stored with the key it carried (``provider_key``), so one that
came while its send was still ``sending`` settles it at a later sweep.

An event stored before its send recorded its ``message_id`` (the provider's first event
can race the consumer's settle) is applied later by :meth:`EventStore.apply_late_events`,
which the receiver runs every few seconds, beside :meth:`EventStore.prune_tokens`; it
first settles the sends that kept events can settle now.

:meth:`EventStore.remember_token` keeps a provider's signature token (Mailgun's) for the
tolerance window in ``webhook_tokens``, shared by every receiver: False when the token was
seen before with other event data (a replay).

psycopg errors become :class:`StorageError` for every event of the batch (the receiver
answers 503 and the sender retries; the event id makes the retry safe); a deadlock with
another receiver process is retried once first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from mailbus.feedback.events import NAMED_PROVIDERS, STATUS_RANK, DeliveryEvent
from mailbus.kernel import schema_guard
from mailbus.kernel.coalescer import Coalescer
from mailbus.kernel.errors import StorageError
from mailbus.kernel.pooling import connect_options
from mailbus.kernel.provider_key import parse_provider_key
from mailbus.kernel.send_routes import FALLBACK, fallback_route
from mailbus.kernel.tracecontext import TraceContext, parse
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus_client.sqlfiles import load_queries

__all__ = ["EventStore", "LateEvents", "Recorded"]

log = logging.getLogger("mailbus.webhooks")


@dataclass(frozen=True)
class Recorded:
    """What one event did: ``new`` (False: a duplicate, nothing changed), ``matched`` (a
    send has its message_id), ``updated`` sends, ``suppressed`` addresses added."""

    new: bool
    matched: bool
    updated: int
    suppressed: int
    settled: int = 0  # the send in `unknown` this event settled as accepted (0 or 1)
    trace: TraceContext | None = None  # the trace context of the send it matched

    @property
    def result(self) -> str:
        """``stored``, ``duplicate`` or ``unmatched`` (stored, no send has its message_id)."""
        if not self.new:
            return "duplicate"
        return "stored" if self.matched else "unmatched"


@dataclass(frozen=True)
class LateEvents:
    """One sweep: events ``applied`` now that their send has its message_id, sends
    ``updated``, addresses ``suppressed``."""

    applied: int
    updated: int
    suppressed: int


class EventStore:
    def __init__(
        self,
        database_url: str,
        max_connections: int = 4,
        max_batch: int = 500,
        sent_through: str | None = None,
        key_prefix: str = "",
        tracer: Tracer = NOOP,
        fallback_through: str | None = None,
        transaction_pooling: bool = False,
    ) -> None:
        self._tracer = tracer  # MAILBUS_OTEL_EXPORTER: a span per event applied to a send
        self._key_prefix = key_prefix  # MAILBUS_PROVIDER_KEY_PREFIX: events echo the key sent
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
        self._queries = load_queries("mailbus.feedback", "events.sql")
        self._unsubscribe = load_queries("mailbus.feedback", "unsubscribe.sql")["unsubscribe"]
        self._batches: Coalescer[tuple[str, DeliveryEvent], Recorded] = Coalescer(
            self._record_batch, max_batch=max_batch
        )
        # email_sends.provider of a route (mailbus/kernel/send_routes.py): "" for NULL, the
        # default; "fallback:<kind>" the fallback of that kind, whichever this receiver names;
        # the bare "fallback" of calls recorded before the kind was, MAILBUS_FALLBACK_PROVIDER's
        routes = {"": sent_through, FALLBACK: fallback_through}
        routes.update({fallback_route(kind): kind for kind in NAMED_PROVIDERS})
        through = {route: kind for route, kind in routes.items() if kind in NAMED_PROVIDERS}
        self._matching = {"through": json.dumps(through), "named": list(NAMED_PROVIDERS)}

    async def open(self) -> None:
        try:
            await self._pool.open(wait=True, timeout=10)
        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout is one too
            raise StorageError(f"cannot reach PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        await self._pool.close()

    async def record(self, provider: str, event: DeliveryEvent) -> Recorded:
        """Record ``event``; one applied to a send is a span in that send's trace, and a
        log line carrying it."""
        recorded = await self._batches.submit((provider, event))
        if recorded.new and recorded.matched:
            attributes = {
                "mailbus.provider": provider,
                "mailbus.event.id": event.event_id,
                "mailbus.event.type": event.type,
                "mailbus.message_id": event.message_id,
            }
            with self._tracer.span("mailbus.event_applied", recorded.trace, attributes):
                log.info(
                    "delivery event applied",
                    extra={
                        "provider": provider,
                        "event_type": event.type,
                        "event_id": event.event_id,
                        "message_id": event.message_id,
                    },
                )
        return recorded

    async def apply_late_events(self) -> LateEvents:
        """Settle the sends that kept events can settle now (their call has ended with no
        known outcome), then apply up to 1,000 events that came before their send recorded
        its message_id."""
        try:
            async with self._pool.connection(timeout=10) as conn:
                kept = await conn.execute(self._queries["kept_settlements"])
                settle = [
                    self._settlement(provider, key, message_id)
                    for provider, key, message_id in await kept.fetchall()
                    # kept under an earlier MAILBUS_PROVIDER_KEY_PREFIX: no send of ours now
                    if parse_provider_key(self._key_prefix, key) is not None
                ]
                await self._settle(conn, settle)
                cursor = await conn.execute(
                    self._queries["apply_late_events"],
                    {"ranks": list(STATUS_RANK), **self._matching},
                )
                row = await cursor.fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"applying late delivery events failed: {exc}") from exc
        assert row is not None
        return LateEvents(int(row[0]), int(row[1]), int(row[2]))

    async def remember_token(self, provider: str, token: str, digest: bytes) -> bool:
        """Record ``provider``'s signature ``token``, first seen with ``digest`` (of the
        event data it signs for); False when it was seen before with another digest."""
        params = {"provider": provider, "token": token, "digest": digest}
        try:
            async with self._pool.connection(timeout=10) as conn:
                cursor = await conn.execute(self._queries["remember_token"], params)
                row = await cursor.fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"remembering a webhook token failed: {exc}") from exc
        return row is not None

    async def prune_tokens(self, keep_s: float) -> int:
        """Forget tokens seen more than ``keep_s`` seconds ago; how many."""
        try:
            async with self._pool.connection(timeout=10) as conn:
                cursor = await conn.execute(self._queries["prune_tokens"], {"keep_s": keep_s})
        except psycopg.Error as exc:
            raise StorageError(f"pruning webhook tokens failed: {exc}") from exc
        return cursor.rowcount

    async def unsubscribe(self, address: str, source: str) -> bool:
        """Suppress ``address`` (reason ``unsubscribed``); whether it was new. Idempotent."""
        try:
            async with self._pool.connection(timeout=10) as conn:
                cursor = await conn.execute(
                    self._unsubscribe, {"address": address, "source": source}
                )
                added = await cursor.fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"unsubscribing failed: {exc}") from exc
        return added is not None

    async def ready(self) -> bool:
        """Whether PostgreSQL answers within two seconds, the wait for a pooled connection
        and the statement together: a PgBouncer holds a statement until a server session is
        free (up to its query_wait_timeout, 120 s), which no statement timeout counts."""
        try:
            async with asyncio.timeout(2), self._pool.connection() as conn:
                await conn.execute(self._queries["ready"])
        except (psycopg.Error, TimeoutError):
            return False
        return True

    async def _record_batch(self, items: Sequence[tuple[str, DeliveryEvent]]) -> list[Recorded]:
        rows: list[dict[str, Any]] = []
        first: dict[tuple[str, str], int] = {}
        for n, (provider, event) in enumerate(items):
            key = (provider, event.event_id)
            if key in first:
                continue
            first[key] = n
            settles = self._settles(provider, event)
            rows.append(_row(n, provider, event, event.dedupe_key if settles else None))
        params = {"events": json.dumps(rows), "ranks": list(STATUS_RANK), **self._matching}
        settle = [
            self._settlement(p, e.dedupe_key, e.message_id)
            for p, e in items
            if e.dedupe_key is not None and self._settles(p, e)
        ]
        settled: set[str] = set()
        for attempt in (1, 2):
            try:
                async with self._pool.connection(timeout=10) as conn:
                    settled.update(await self._settle(conn, settle))
                    cursor = await conn.execute(self._queries["record_events"], params)
                    answers = await cursor.fetchall()
                break
            except psycopg.errors.DeadlockDetected as exc:
                if attempt == 2:
                    raise StorageError(f"recording delivery events failed: {exc}") from exc
            except psycopg.Error as exc:
                raise StorageError(f"recording delivery events failed: {exc}") from exc
        recorded = {
            int(n): Recorded(
                bool(new),
                bool(matched),
                int(updated),
                int(suppressed),
                trace=parse(traceparent, tracestate).context,
            )
            for n, new, matched, updated, suppressed, traceparent, tracestate in answers
        }
        results = []
        for n, (provider, event) in enumerate(items):
            own = recorded.get(n)
            if own is None:  # a repeat within the batch: the first one's duplicate
                own = Recorded(False, recorded[first[(provider, event.event_id)]].matched, 0, 0)
            results.append(own)
        for n, (_, event) in enumerate(items):
            if event.dedupe_key in settled and event.proves_acceptance:
                settled.discard(event.dedupe_key)  # its first such event settled it
                results[n] = replace(results[n], settled=1)
        return results

    def _settles(self, provider: str, event: DeliveryEvent) -> bool:
        """Whether ``event`` may settle a send: it proves the provider took the mail and
        carries a key of this deployment (``MAILBUS_PROVIDER_KEY_PREFIX``)."""
        key = event.dedupe_key
        return (
            key is not None
            and event.proves_acceptance
            and parse_provider_key(self._key_prefix, key) is not None
        )

    def _settlement(self, provider: str, key: str, message_id: str) -> dict[str, Any]:
        """One send for ``settle_from_events`` to settle: found by its dedupe key, checked
        against the provider key the event carried."""
        ours = parse_provider_key(self._key_prefix, key)
        assert ours is not None  # _settles checked it
        return {"provider": provider, "dedupe_key": ours[0], "key": key, "message_id": message_id}

    async def _settle(
        self, conn: psycopg.AsyncConnection[Any], settle: list[dict[str, Any]]
    ) -> set[str]:
        """Settle the sends ``settle`` names that can be now; the keys settled."""
        if not settle:
            return set()
        done = await conn.execute(
            self._queries["settle_from_events"],
            {"settle": json.dumps(settle), "through": self._matching["through"]},
        )
        return {str(key) for (key,) in await done.fetchall()}


def _row(n: int, provider: str, event: DeliveryEvent, provider_key: str | None) -> dict[str, Any]:
    return {
        "n": n,
        "provider": provider,
        "event_id": event.event_id,
        "type": event.type,
        "bounce": event.bounce,
        "message_id": event.message_id,
        "occurred_at": event.occurred_at.isoformat(),
        "rank": event.rank,
        "suppress": event.suppresses,
        "reason": event.suppression_reason,
        "source": f"webhook:{provider}",
        "detail": event.reason,
        "suppression": event.suppression,
        "provider_key": provider_key,  # kept to settle its send later (settle_from_events)
    }
