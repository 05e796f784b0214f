"""`mailbus relay`: publishes committed outbox rows to Kafka, never losing one.

A pass drains up to three tables, each with the same claim-publish-commit transaction
(:func:`mailbus.relay.batch.publish_claimed`; a pointer worker woken by new sends alone
skips the dead letters, :mod:`mailbus.relay.dead_letter_claims`):

- due ``email_sends`` rows become pointers on ``{prefix}.send.{priority}``, keyed by
  dedupe key (:meth:`Relay.publish_due_batch`);
- ``email_dead_letters`` rows become records on ``{prefix}.send.dlq``
  (:meth:`Relay.publish_dead_letters`, :mod:`mailbus.relay.dead_letters`);
- ``email_send_events`` rows become outcome events on ``{prefix}.send.events``, one relay
  at a time and in each send's order (:meth:`Relay.publish_send_events`,
  :mod:`mailbus.relay.events`); published ones are pruned after a day.

The first two are the **pointer lane**, the third the **event lane**. `mailbus relay` runs
the pointer lane as ``MAILBUS_RELAY_WORKERS`` relays (:mod:`mailbus.relay.workers`, so one
batch is claimed while another waits for Kafka) and the event lane as one, each in its own
thread with its own connections, producer and NOTIFY channel, so outcome events (their
volume, their ordered waves, trouble with their topic) never slow the pointers down; a
``Relay`` built with both lanes drains all three. Beside them runs the **P0 lane**, one
relay that claims P0 sends alone (``claim_due_p0``): while a campaign keeps the pointer
workers inside batches of newsletters, a P0 row waits for a NOTIFY and a small claim, not
for a batch of thousands to be acknowledged (docs/benchmarks/speed.md). New P0 sends
notify a channel of their own, which only the P0 lane listens to, so a P0 row wakes one
claim instead of every pointer worker's, and the campaign's inserts never wake the P0
lane. Pointer workers with a P0 lane beside them leave a P0 row to it for its first
second, then claim it first as any pointer lane does (the lane stopped or behind); SKIP
LOCKED gives each row to one of them.

A crash anywhere before a commit rolls that batch's marks back, so the rows are claimed
again: at-least-once onto Kafka, made harmless by the consumer's guarded claim. Several
relays can run at once; SKIP LOCKED hands each its own rows (no leader election needed).
A send's W3C trace context (``traceparent``, ``tracestate``), when its row has one, travels as
the pointer's Kafka headers of the same names (docs/guides/tracing.md): the row's own, or,
with an exporter, that of the pointer's ``send`` span, a child of the row's. A pointer to a
row never claimed carries its template in a header (:mod:`mailbus.schemas.pointer_headers`).
Between passes the relay sleeps until a NOTIFY on its lanes' channels (inserts of sends,
P0 ones on their own channel, and of dead letters; recorded outcome events), the next
row's ``next_try_at`` (looked up at most every 0.1 s, :mod:`mailbus.relay.next_retry`),
or the polling interval, whichever comes first; the pointer workers of one process answer
each notification once (:mod:`mailbus.relay.standby`); the event lane then waits until
:data:`~mailbus.relay.events.GATHER_S` has passed since its last pass began, so the
events of many settles go out in one pass.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import psycopg
from psycopg.rows import TupleRow, tuple_row

from mailbus.kernel import health, metrics, schema_guard
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracecontext import TraceContext, parse
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.relay.batch import BatchResult, Outbox, publish_claimed
from mailbus.relay.dead_letter_claims import DeadLetterClaims, may_name_dead_letters
from mailbus.relay.dead_letters import dead_letter_outbox
from mailbus.relay.events import RETENTION_S, gather_left, prune_due, send_event_outbox
from mailbus.relay.next_retry import NextRetry
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher, PublishError
from mailbus.relay.standby import Standby
from mailbus.schemas.codec import SendPointer
from mailbus.schemas.pointer_headers import first_attempt_header
from mailbus.schemas.registry import pointer_codec
from mailbus_client.sqlfiles import load_queries

__all__ = [
    "ALL_LANES",
    "EVENTS",
    "NOTIFY_CHANNEL",
    "P0_NOTIFY_CHANNEL",
    "P0_POINTERS",
    "POINTERS",
    "Relay",
    "RelayStats",
]

NOTIFY_CHANNEL = "mailbus_outbox"  # new sends other than P0, and dead letters
P0_NOTIFY_CHANNEL = "mailbus_outbox_p0"  # new P0 sends (schemas/sql/0068)
POINTERS = "pointers"  # send pointers and dead letters
EVENTS = "events"  # outcome events
P0_POINTERS = "p0 pointers"  # send pointers of P0 rows alone
# a P0 row is the P0 lane's for this long beside pointer workers (claim_due_beside_p0's)
P0_LANE_FIRST_S = 1.0
ALL_LANES = frozenset({POINTERS, EVENTS})
_SEND_LANES = frozenset({POINTERS, P0_POINTERS})
_SLICE_S = 0.1  # a wait's slice: SIGTERM and another worker's release are seen within it
_TAKEN_READS = 8  # reads of notifications already waiting, when one is answered
_HEARTBEAT_S = 30.0  # a lane that has not come round its loop for this long is not ready
_CHANNELS = {
    POINTERS: (NOTIFY_CHANNEL, P0_NOTIFY_CHANNEL),
    P0_POINTERS: (P0_NOTIFY_CHANNEL,),
    EVENTS: ("mailbus_send_events",),  # schemas/sql/0015
}
Row = TypeVar("Row")
log = logging.getLogger("mailbus.relay")


@dataclass
class RelayStats:
    published: int = 0  # send pointers acknowledged by Kafka
    dead_letters: int = 0  # DLQ records acknowledged by Kafka
    send_events: int = 0  # outcome events acknowledged by Kafka
    batches: int = 0  # claims that took rows
    passes: int = 0  # claims made, whether they took rows or not
    retry_lookups: int = 0  # look-ups of the next retry coming due (relay/next_retry.py)
    dead_letter_claims: int = 0  # of the claims, those of dead letters
    unacknowledged: int = 0

    def __add__(self, other: RelayStats) -> RelayStats:
        return RelayStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


class Relay:
    def __init__(
        self,
        settings: Settings,
        publisher: PointerPublisher | None = None,
        lanes: frozenset[str] = ALL_LANES,
        component: str | None = None,
        tracer: Tracer = NOOP,
        p0_lane_apart: bool = False,
        standby: Standby | None = None,
    ) -> None:
        """``component``: its name in ``/readyz``; by default ``relay`` for a relay with the
        pointer lane, ``relay.events`` for the event lane alone. ``tracer``: a ``send`` span
        per pointer, under its row's trace context (docs/guides/tracing.md). ``p0_lane_apart``:
        a P0 lane runs beside this relay's pointer lane, which new P0 sends then do not wake
        and which leaves them to that lane for their first second (``claim_due_beside_p0``).
        ``standby``: what the pointer workers of its process have answered; a notification
        another of them answered is passed by (relay/standby.py)."""
        self.settings = settings
        self._standby = standby
        self._releases_seen = 0  # the standby's releases when this relay's pass began
        self.tracer = tracer
        self.lanes = lanes
        self._channels = sorted(
            {channel for lane in lanes for channel in _CHANNELS[lane]}
            - ({P0_NOTIFY_CHANNEL} if p0_lane_apart and P0_POINTERS not in lanes else set())
        )
        self._component = component or ("relay" if POINTERS in lanes else "relay.events")
        self.stats = RelayStats()
        self._publisher = publisher or PointerPublisher(kafka_client_config(settings))
        self._queries = load_queries("mailbus.relay", "queries.sql")
        self._codec = pointer_codec(settings)
        self._sends: Outbox[TupleRow] = Outbox(
            name="send pointers",
            claim=self._queries["claim_due_beside_p0" if p0_lane_apart else "claim_due"],
            unclaim=self._queries["unclaim"],
            row_factory=tuple_row,
            row_id=lambda row: int(row[0]),
            to_message=self._pointer_message,
        )
        self._p0_sends = replace(
            self._sends, name="P0 send pointers", claim=self._queries["claim_due_p0"]
        )
        self._dead_letters = dead_letter_outbox(settings, self._queries)
        self._send_events = send_event_outbox(settings, self._queries)
        self._pruned_at: float | None = None
        self._pass_started: float | None = None  # monotonic
        self._conn: psycopg.Connection | None = None
        self._listener: psycopg.Connection | None = None
        self._next_retry = NextRetry()
        self._retry_look_up = _retry_look_up_for(lanes, p0_lane_apart)
        self._dead_letter_claims = DeadLetterClaims(settings.relay_poll_interval)

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set; survives PostgreSQL and Kafka outages. Anything
        else ends the thread, and its readiness with it (a mark that stops beating goes
        stale too: a pass stuck in a call to a black-holed database)."""
        try:
            self._run(stop)
        except BaseException as exc:
            self._release_others()
            health.mark(self._component, False, f"stopped: {type(exc).__name__}: {exc}")
            raise

    def _run(self, stop: threading.Event) -> None:
        reconnect_delay = 0.5
        heartbeat_s = max(_HEARTBEAT_S, 3 * self.settings.relay_poll_interval)
        while not stop.is_set():
            try:
                self._connect()
                reconnect_delay = 0.5  # connected: the next outage starts over
                sends_alone = False  # the first pass claims every table
                while not stop.is_set():
                    # the database answers, Kafka acknowledges, and the pass came round
                    health.mark(self._component, True, heartbeat_s=heartbeat_s)
                    if self._one_pass(stop, sends_alone) < self.settings.relay_batch_size:
                        sends_alone = self._wait_for_work(stop)
                    else:
                        sends_alone = False  # more may be due: the next pass claims every table
            except psycopg.OperationalError as exc:
                self._release_others()
                health.mark(self._component, False, "database unavailable")
                log.warning("database unavailable, retrying in %.1fs: %s", reconnect_delay, exc)
                self._disconnect()
                stop.wait(reconnect_delay)
                reconnect_delay = min(reconnect_delay * 2, 10.0)
            except PublishError as exc:  # the same worker claims again at once
                health.mark(self._component, False, "Kafka producer failed")
                log.error("producer failed, recreating it: %s", exc)
                self._publisher = PointerPublisher(kafka_client_config(self.settings))
        health.mark(self._component, False, "stopping")
        self.close()

    def _one_pass(self, stop: threading.Event, sends_alone: bool = False) -> int:
        """Drain each table of the lanes once; the most rows any claim took. A pointer
        lane woken for ``sends_alone`` may skip its dead letters
        (:mod:`mailbus.relay.dead_letter_claims`)."""
        self._pass_started = time.monotonic()
        if self._standby is not None:  # a release from now on may be of rows this misses
            self._releases_seen = self._standby.releases
        passes = []
        if POINTERS in self.lanes:
            passes.append(self.publish_due_batch)
            if self._dead_letter_claims.due(time.monotonic(), sends_alone):
                passes.append(self.publish_dead_letters)
        if P0_POINTERS in self.lanes:
            passes += [self.publish_due_p0_batch]
        if EVENTS in self.lanes:
            passes += [self.publish_send_events]
        claimed = [0 if stop.is_set() else one(stop) for one in passes]
        if EVENTS in self.lanes:
            self._prune_send_events()
        return max(claimed)

    def close(self) -> None:
        """Close the database connections and flush the producer (``run`` ends with it)."""
        self._disconnect()
        self._publisher.close()

    def publish_due_batch(self, stop: threading.Event) -> int:
        """One pass over due sends; returns the number of rows claimed."""
        result = self._publish(self._sends, stop)
        self.stats.published += result.published
        return result.claimed

    def publish_due_p0_batch(self, stop: threading.Event) -> int:
        """One pass over due P0 sends alone; returns the number of rows claimed."""
        result = self._publish(self._p0_sends, stop)
        self.stats.published += result.published
        return result.claimed

    def publish_dead_letters(self, stop: threading.Event) -> int:
        """One pass over unpublished dead letters; returns the number of rows claimed."""
        began_at = time.monotonic()
        self._dead_letter_claims.forget()  # until this claim ends well
        self.stats.dead_letter_claims += 1
        result = self._publish(self._dead_letters, stop)
        self.stats.dead_letters += result.published
        if result.claimed < self.settings.relay_batch_size and not result.unacknowledged:
            self._dead_letter_claims.left_none(began_at)
        return result.claimed

    def publish_send_events(self, stop: threading.Event) -> int:
        """One pass over unpublished outcome events (none while another relay holds their
        lock); returns the number of rows claimed."""
        result = self._publish(self._send_events, stop)
        self.stats.send_events += result.published
        return result.claimed

    def _prune_send_events(self) -> None:
        now = time.monotonic()
        if prune_due(now, self._pruned_at):
            conn = self._require_connection()
            conn.execute(self._queries["prune_send_events"], {"retention_s": RETENTION_S})
            self._pruned_at = now

    def _publish(self, outbox: Outbox[Row], stop: threading.Event) -> BatchResult:
        result = publish_claimed(
            self._require_connection(),
            outbox,
            self.settings.relay_batch_size,
            self._publisher,
            stop,
            on_full=self._release_others,  # more than a batch is due: the others help
        )
        self.stats.passes += 1
        if result.claimed:
            self.stats.batches += 1
        for topic, count in result.acknowledged_by_topic.items():
            metrics.observe_published(topic.rsplit(".", 1)[-1], count)  # p0..p2, dlq, events
        self.stats.unacknowledged += result.unacknowledged
        if result.unacknowledged:
            stop.wait(1.0)  # Kafka is struggling: do not spin on the same rows
        return result

    def _pointer_message(self, row: TupleRow) -> OutgoingMessage:
        (
            send_id,
            dedupe_key,
            priority,
            attempts,
            created_at,
            traceparent,
            tracestate,
            due_s,
            template,
            never_claimed,
        ) = row
        topic = self.settings.topic(priority)
        span = self.tracer.start(
            f"send {topic}",
            _row_context(traceparent, tracestate),
            {
                "messaging.system": "kafka",
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                "messaging.destination.name": topic,
                "messaging.kafka.message.key": dedupe_key,
                "mailbus.send_id": send_id,
                "mailbus.attempt": attempts,
            },
        )
        return OutgoingMessage(
            topic=topic,
            key=dedupe_key.encode(),
            value=self._codec.encode(
                SendPointer.of(send_id, dedupe_key, priority, attempts, created_at)
            ),
            headers=(
                *(span.context.headers() if span.context is not None else ()),
                *((first_attempt_header(template),) if never_claimed else ()),
            ),
            span=span,
            due_s=max(0.0, float(due_s)),
        )

    def _wait_for_work(self, stop: threading.Event) -> bool:
        """Sleep until there may be work. True if only sends may be: notifications of new
        sends woke it, or a retry's time came (its due time, or a held answer's end);
        False after anything else (the polling interval, another worker's release, a
        notification of dead letters or without a name, a stop)."""
        poll_ends = time.monotonic() + self.settings.relay_poll_interval
        deadline = poll_ends
        if self.lanes & _SEND_LANES:  # a retry coming due is only a send lane's business
            deadline = min(deadline, self._next_retry_wake_by(time.monotonic()))
        payloads = self._wait_for_notification(stop, deadline)
        if not self.lanes & _SEND_LANES:  # outcome events: gather the settles of a moment
            stop.wait(gather_left(time.monotonic(), self._pass_started))
        if payloads is not None:
            return not may_name_dead_letters(payloads)
        return deadline < poll_ends and not stop.is_set()

    def _next_retry_wake_by(self, now: float) -> float:
        """When the next retry comes due, looked up unless an answer still holds; on a held
        answer, also when it stops holding, for a pass: a retry scheduled since the look-up
        may be due by then, and only a claim finds those (:mod:`mailbus.relay.next_retry`)."""
        if not self._next_retry.stale(now):
            return self._next_retry.held_until()
        # A retry due since the last pass began came after that pass's claim: due now.
        since_claim_s = 0.0 if self._pass_started is None else now - self._pass_started
        # Planned at each run, never prepared: a plan kept from an empty outbox scans the
        # table rather than read one entry of email_sends_next_retry_idx (0078) a priority
        # (relay/queries.sql says when it may read more).
        row = self._require_connection().execute(
            self._queries["seconds_until_next_due"],
            {**self._retry_look_up, "since_claim_s": since_claim_s},
            prepare=False,
        )
        due = row.fetchone()
        self._next_retry.looked_up(
            time.monotonic(), None if due is None or due[0] is None else float(due[0])
        )
        self.stats.retry_lookups += 1
        return self._next_retry.wake_at()

    def _wait_for_notification(self, stop: threading.Event, deadline: float) -> list[str] | None:
        """Wait until ``deadline`` for a notification this worker answers; the payloads it
        took, or None if none came."""
        assert self._listener is not None
        # Short slices so SIGTERM, and another worker's release, are seen promptly.
        while not stop.is_set() and (remaining := deadline - time.monotonic()) > 0:
            if self._standby is not None and self._standby.releases != self._releases_seen:
                # another worker's claim came back full, or its pass failed: as a
                # notification without a name, it may be of anything
                return [""]
            notifications = self._listener.notifies(timeout=min(remaining, _SLICE_S), stop_after=1)
            try:  # closed before the next read: an open one holds the connection's lock
                payloads = [n.payload for n in notifications]
            finally:
                notifications.close()
            # every one of a packet is answered (a list, not any()'s first True alone)
            if any([self._answers(payload) for payload in payloads]):
                if self._standby is not None:
                    payloads += self._take_waiting_notifications(self._standby)
                return payloads
        return None

    def _answers(self, payload: str) -> bool:
        return self._standby is None or self._standby.answer(payload)

    def _take_waiting_notifications(self, standby: Standby) -> list[str]:
        """Answer the notifications already on the listener's connection too: the claim
        about to begin sees their rows (at most a few reads, not a stream). Their payloads."""
        assert self._listener is not None
        payloads: list[str] = []
        for _ in range(_TAKEN_READS):
            taken = [n.payload for n in self._listener.notifies(timeout=0)]
            if not taken:
                break
            for payload in taken:
                standby.answer(payload)
            payloads += taken
        return payloads

    def _release_others(self) -> None:
        """This worker answered rows it may not have claimed (its claim came back full,
        or its pass failed): every other worker of the process makes a pass
        (relay/standby.py). No database call: it may be the database that failed."""
        if self._standby is not None:
            self._standby.release()
            self._releases_seen += 1  # not a reason for this worker's own wait to end

    def _connect(self) -> None:
        if self._conn is None:
            conn = psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=5)
            schema_guard.check(conn)  # a database restored or failed over behind the build
            # A pass's commit only records "on Kafka" (published_at). Lost in a crash of
            # PostgreSQL, its rows are published again, as after a relay crash before the
            # commit; any later synchronous commit (a consumer's claim) makes it durable
            # first. So no pass waits for the WAL flush.
            conn.execute("SET synchronous_commit = off")
            self._conn = conn
        if self._listener is None:
            listener = psycopg.connect(
                self.settings.database_url, autocommit=True, connect_timeout=5
            )
            schema_guard.check(listener)
            self._listener = listener
            for channel in self._channels:
                self._listener.execute(f"LISTEN {channel}")

    def _require_connection(self) -> psycopg.Connection:
        if self._conn is None:
            self._connect()
        assert self._conn is not None
        return self._conn

    def _disconnect(self) -> None:
        for conn in (self._conn, self._listener):
            if conn is not None:
                conn.close()
        self._conn = self._listener = None
        self._next_retry.forget()
        self._dead_letter_claims.forget()  # notifications were lost with the connection


def _retry_look_up_for(lanes: frozenset[str], p0_lane_apart: bool) -> dict[str, list[Any]]:
    """What a relay of ``lanes`` looks up retries of: the P0 lane's P0 retries alone, or a
    pointer lane's of every priority; with each, how long after its ``next_try_at`` the
    lane's claim takes it. Beside a P0 lane, a P0 retry is that lane's for its first
    :data:`P0_LANE_FIRST_S` (``claim_due_beside_p0``), so the pointer workers wake for it no
    sooner, and take it then if the lane is down."""
    if POINTERS in lanes:
        priorities = list(metrics.PRIORITIES)
        after = [P0_LANE_FIRST_S if p0_lane_apart and p == "p0" else 0.0 for p in priorities]
    else:
        priorities = ["p0"] if P0_POINTERS in lanes else []
        after = [0.0] * len(priorities)
    return {"priorities": priorities, "claimable_after_s": after}


def _row_context(traceparent: str | None, tracestate: str | None) -> TraceContext | None:
    """The row's W3C trace context (docs/guides/tracing.md); None for a row without one, or
    with a malformed one (counted, and the mail goes on)."""
    if traceparent is None:
        return None
    carried = parse(traceparent, tracestate)
    if carried.malformed:
        metrics.observe_malformed_trace("relay")
    return carried.context
