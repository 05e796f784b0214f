"""The pointer lane's workers (relay/workers.py): several batches in flight at once in one
relay process, every row of a backlog published once acknowledged and marked, none left
claimed. Real PostgreSQL and Kafka."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import psycopg
import pytest
from kafka_reader import read_pointers
from relay_runner import wait_until

from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.kernel.topics import send_topics
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.relay.workers import BULK_NICENESS, PointerWorkers


class InFlight:
    """How many batches the workers' producers hold at once (publish called, acks awaited)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


class CountingPublisher(PointerPublisher):
    """The real producer; until two batches have been in flight at once, a batch waits (at
    most 5 s) before it is sent, so an overlap that can happen is observed, not left to
    luck; a relay that cannot overlap just waits 5 s per batch and is seen at 1."""

    def __init__(self, settings: Settings, in_flight: InFlight) -> None:
        super().__init__(kafka_client_config(settings))
        self._in_flight = in_flight

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        self._in_flight.enter()
        try:
            deadline = time.monotonic() + 5
            while self._in_flight.most < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            return super().publish(messages, stop)
        finally:
            self._in_flight.leave()


def seed(database_url: str, count: int) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
            " SELECT 'w-' || n, 'u' || n || '@example.com', 'welcome', 'p' || n %% 3"
            " FROM generate_series(1, %s) n",
            (count,),
        )


def unpublished(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM email_sends WHERE published_at IS NULL")
        return int(row.fetchone()[0])  # type: ignore[index]


@contextmanager
def running(workers: PointerWorkers) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=workers.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_two_workers_have_two_batches_in_flight_at_once(settings: Settings) -> None:
    seed(settings.database_url, 400)
    in_flight = InFlight()
    two = replace(settings, relay_workers=2, relay_batch_size=50)
    workers = PointerWorkers(two, publisher=lambda: CountingPublisher(two, in_flight))
    with running(workers):
        wait_until(lambda: unpublished(settings.database_url) == 0, 60, "the backlog published")
    assert in_flight.most == 2  # one worker claimed while the other waited for its acks
    assert all(relay.stats.published > 0 for relay in workers.relays)


def test_workers_publish_and_mark_every_row_of_a_backlog(settings: Settings) -> None:
    total = 3000
    seed(settings.database_url, total)
    three = replace(settings, relay_workers=3, relay_batch_size=100)
    workers = PointerWorkers(three)
    with running(workers):
        wait_until(lambda: unpublished(settings.database_url) == 0, 60, "the backlog published")
    assert workers.stats.published == total  # each acknowledged once, by one worker
    assert workers.stats.unacknowledged == 0
    with psycopg.connect(settings.database_url) as conn:  # no worker's claim still open
        locked = conn.execute("SELECT id FROM email_sends FOR UPDATE NOWAIT").fetchall()
        assert len(locked) == total
        idle_in_transaction = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
        assert idle_in_transaction == (0,)
    seen = read_pointers(settings.kafka_bootstrap, send_topics(settings), total, timeout=60)
    assert len(seen) == total  # every row's pointer is on its priority topic


def test_a_new_send_wakes_one_worker_not_each(settings: Settings) -> None:
    """Sends committed one at a time: each is answered by one worker's pass, and none
    waits for the polling interval. Its claims are of sends: dead letters are claimed by
    each worker's first pass, then only when a notification names them (0077)."""
    sends, gap_s = 20, 0.1
    two = replace(settings, relay_workers=2, relay_poll_interval=30.0)
    workers = PointerWorkers(two)
    with running(workers):
        wait_until(lambda: workers.stats.passes >= 4, 10, "each worker's first pass")
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            for n in range(sends):
                conn.execute(
                    "INSERT INTO email_sends (dedupe_key, to_address, template)"
                    " VALUES (%s, %s, 'welcome')",
                    (f"one-{n}", f"u{n}@example.com"),
                )
                time.sleep(gap_s)
        wait_until(lambda: unpublished(settings.database_url) == 0, 5, "every send published")
    assert workers.stats.published == sends
    first, answering = 4, 2 * sends  # each worker's first pass; one worker's per send
    # Every worker answering every send would be 4 * sends; a few more than one's are
    # allowed, for a send committed while the first worker was still in a pass.
    assert workers.stats.passes <= first + answering + 12, workers.stats.passes
    # a claim of dead letters per send before 0077 (20 or more)
    assert workers.stats.dead_letter_claims <= 2 + 4, workers.stats


def test_a_burst_larger_than_a_batch_wakes_the_other_workers(settings: Settings) -> None:
    """One transaction of more rows than a claim takes (enqueue_many, a campaign's tick)
    notifies once, and one worker answers it; its full claim wakes the others at once, so
    they claim the next batches beside it instead of at their polling interval."""
    in_flight = InFlight()
    two = replace(settings, relay_workers=2, relay_batch_size=100, relay_poll_interval=30.0)
    workers = PointerWorkers(two, publisher=lambda: CountingPublisher(two, in_flight))
    with running(workers):
        wait_until(lambda: workers.stats.passes >= 4, 10, "each worker's first pass")
        seed(settings.database_url, 400)  # one statement, one transaction
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "the burst published")
    assert in_flight.most == 2  # the second worker claimed while the first published
    assert all(relay.stats.batches > 0 for relay in workers.relays)


def _niceness(thread: threading.Thread) -> int:
    assert thread.native_id is not None
    return os.getpriority(os.PRIO_PROCESS, thread.native_id)  # Linux keeps one per thread


@pytest.mark.parametrize("p0_lane_apart", [True, False])
def test_beside_a_p0_lane_the_workers_yield_the_cpu_to_it(
    settings: Settings, p0_lane_apart: bool
) -> None:
    """Issue 37: beside a P0 lane each worker's thread, the calling one too, runs
    BULK_NICENESS nicer, so on a busy core the lane's process wakes and claims first (P0's
    commit→broker p99 while 100,000 newsletters drain: 11.7 ms before, 4.8 after,
    docs/benchmarks/speed.md); the calling thread gets its niceness back when they stop."""
    workers = PointerWorkers(replace(settings, relay_workers=2), p0_lane_apart=p0_lane_apart)
    stop = threading.Event()
    after: list[int] = []

    def call() -> None:
        workers.run(stop)
        after.append(os.getpriority(os.PRIO_PROCESS, 0))  # the calling thread's, once back

    caller = threading.Thread(target=call, daemon=True)
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the caller inherits this thread's
    assert base < 19, "at the largest niceness there is nothing to yield"
    caller.start()
    try:
        wait_until(lambda: workers.stats.passes >= 2, 10, "each worker's first pass")
        second = next(t for t in threading.enumerate() if t.name == "relay-2")
        expected = min(19, base + BULK_NICENESS) if p0_lane_apart else base
        assert (_niceness(caller), _niceness(second)) == (expected, expected)
    finally:
        stop.set()
        caller.join(timeout=60)
    # lowering it back needs root or CAP_SYS_NICE; without, the caller stays nicer
    assert after == [base if os.geteuid() == 0 or not p0_lane_apart else expected]


def test_workers_a_sandbox_refuses_a_niceness_publish_as_before(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A container whose seccomp profile refuses setpriority must not stop the relay: its
    workers keep their priority, say so, and publish."""

    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refused)
    seed(settings.database_url, 30)
    workers = PointerWorkers(replace(settings, relay_workers=2), p0_lane_apart=True)
    with running(workers):
        wait_until(lambda: unpublished(settings.database_url) == 0, 30, "the rows published")
    assert "pointer workers keep their CPU priority" in caplog.text
