"""Where a P0 row's commit→broker time goes in the relay (issue 37): the lane's wake-up, its
claim, Kafka's acknowledgement and the pass's own commit, idle or while a backlog of
newsletters drains.

    python3 bench/relay_lane_parts.py [--rate 500] [--seconds 15] [--backlog 0] [--runs 3]

Needs the local stack. The relay's lanes run as ``mailbus relay`` runs them
(mailbus/app/cli.py): the pointer workers and the event lane in threads of this process,
the P0 lane in a child process of its own (relay/p0_process.py). Each pass is timed by
wrapping two of the relay's functions, in this process and in the child: its wait for
work (the wait's return is the wake-up) and its claim-publish-commit pass (the claim's
rows in hand, Kafka's last acknowledgement, the commit); the child hands its times back
in a file when it ends. P0 rows are committed one by one at ``--rate``/s on topics
with LogAppendTime; for each row, p50 and p99 of:

- **insert+commit**: the INSERT and its COMMIT as the client sees them;
- **wake-up**: from the COMMIT's return to the wake-up of the lane that claimed the row
  (0 when that lane was inside a pass and claimed the row at its next claim);
- **claim**: from the later of the two to the claim's rows in hand;
- **produce→ack**: from there to Kafka's acknowledgement of the pass's last message;
- **mark commit**: from the acknowledgement to the pass's commit (the lane is busy, so the
  next row waits);
- **commit→broker**: the broker's append of the row minus the COMMIT's return.

With ``--backlog N``, N P2 rows are inserted in statements of 2,000 from a second before
the P0 rows, so the pointer workers are inside batches of newsletters meanwhile; the parts
are those of the rows the P0 lane claimed, and rows a pointer worker claimed are counted
and their commit→broker shown apart. This process also inserts and reads what the relay
publishes, so its CPU is the relay's and more; every time is a wall-clock time.
"""

from __future__ import annotations

import argparse
import functools
import os
import pickle
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import psycopg
from broker_times import APPEND_TIME
from confluent_kafka import Consumer
from harness import Bench, percentile
from results import record

import mailbus.relay.relay as relay_module
from mailbus.kernel.settings import load_settings
from mailbus.relay.p0_process import LaneArgs, P0LaneProcess, run_lane
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.relay.relay import EVENTS, Relay
from mailbus.relay.workers import PointerWorkers
from mailbus.schemas.codec import send_pointer_codec

P0_THREAD = "relay-p0"
PARTS = ("insert+commit", "wake-up", "claim", "produce→ack", "mark commit", "commit→broker")


@dataclass
class PassTimes:
    """What the wrapped relay functions saw, per dedupe key (every time from time.time())."""

    woke: dict[int, float] = field(default_factory=dict)  # thread ident → its last wake-up
    wake: dict[str, float] = field(default_factory=dict)
    claimed: dict[str, float] = field(default_factory=dict)
    acked: dict[str, float] = field(default_factory=dict)
    committed: dict[str, float] = field(default_factory=dict)
    lane: dict[str, str] = field(default_factory=dict)  # the claiming thread's name


@contextmanager
def timed_passes(times: PassTimes) -> Iterator[None]:
    """Wrap the relay's wait for work and its pass while the block runs."""
    wait, one_pass = Relay._wait_for_work, relay_module.publish_claimed

    def timed_wait(self: Relay, stop: threading.Event) -> Any:
        woken = wait(self, stop)
        times.woke[threading.get_ident()] = time.time()
        return woken

    def timed_pass(
        conn: Any,
        outbox: Any,
        limit: int,
        publisher: PointerPublisher,
        stop: threading.Event,
        **options: Any,
    ) -> Any:
        keys: list[str] = []
        publish = publisher.publish

        def timed_publish(messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
            keys.extend(m.key.decode() for m in messages)
            claimed = time.time()
            failed = publish(messages, stop)
            acked = time.time()
            for key in keys:
                times.claimed[key], times.acked[key] = claimed, acked
            return failed

        publisher.publish = timed_publish  # type: ignore[method-assign]
        try:
            return one_pass(conn, outbox, limit, publisher, stop, **options)
        finally:
            del publisher.publish
            committed, me = time.time(), threading.current_thread().name
            woke = times.woke.get(threading.get_ident(), 0.0)
            for key in keys:
                times.committed[key], times.wake[key], times.lane[key] = committed, woke, me

    Relay._wait_for_work = timed_wait  # type: ignore[method-assign]
    relay_module.publish_claimed = timed_pass  # type: ignore[assignment]
    try:
        yield
    finally:
        Relay._wait_for_work = wait  # type: ignore[method-assign]
        relay_module.publish_claimed = one_pass


def timed_p0_lane(path: str, conn: Connection, args: LaneArgs) -> None:
    """The P0 lane's child process, its passes timed; its times pickled to ``path`` at its
    end."""
    threading.current_thread().name = P0_THREAD
    times = PassTimes()
    try:
        with timed_passes(times):
            run_lane(conn, args)
    finally:
        with open(path, "wb") as out:
            pickle.dump(times, out)


@contextmanager
def relay_lanes(bench: Bench, times: PassTimes) -> Iterator[None]:
    """The lanes of one ``mailbus relay``: the P0 lane's process, the others' threads; the
    P0 lane's times added to ``times`` once it ended."""
    settings, stop = bench.settings, threading.Event()
    workers = PointerWorkers(settings, p0_lane_apart=True)
    fd, child_times = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    p0 = P0LaneProcess(settings, target=functools.partial(timed_p0_lane, child_times))
    events = Relay(settings, lanes=frozenset({EVENTS}))
    threads = [
        threading.Thread(target=workers.run, args=(stop,), daemon=True),
        threading.Thread(target=p0.run, args=(stop,), daemon=True),
        threading.Thread(target=events.run, args=(stop,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(5)  # connected and listening, the child too
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(70)
        with open(child_times, "rb") as source:
            lane: PassTimes = pickle.load(source)
        os.unlink(child_times)
        for name in ("wake", "claimed", "acked", "committed", "lane"):
            getattr(times, name).update(getattr(lane, name))


def fan_out(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(1, rows + 1, 2000):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " SELECT 'news-' || n, 'u@example.com', 'news', 'p2'"
                " FROM generate_series(%s::int, %s::int) n",
                (first, min(first + 1999, rows)),
            )
            time.sleep(0.02)


def read_appends(bootstrap: str, topic: str, done: threading.Event, count: Callable[[], int],
                 appended: dict[str, float]) -> None:  # fmt: skip
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe([topic])
    codec = send_pointer_codec()
    deadline = None
    while len(appended) < count() or not done.is_set():
        if done.is_set():
            deadline = deadline or time.monotonic() + 60
            if time.monotonic() > deadline:
                break
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            appended[codec.decode(message.value())["dedupe_key"]] = message.timestamp()[1] / 1000
    consumer.close()


def one_run(rate: int, seconds: int, backlog: int) -> dict[str, list[float]]:
    """Each part's samples (s) of the P0 lane's rows; "by a worker": commit→broker of the
    rows a pointer worker claimed."""
    bench = Bench(load_settings(), APPEND_TIME)
    times, started, returned, appended = PassTimes(), {}, {}, {}
    done = threading.Event()
    try:
        with timed_passes(times), relay_lanes(bench, times):
            reader = threading.Thread(
                target=read_appends,
                args=(bench.settings.kafka_bootstrap, bench.settings.topic("p0"), done,
                      lambda: len(started), appended),
                daemon=True,
            )  # fmt: skip
            reader.start()
            if backlog:
                threading.Thread(
                    target=fan_out, args=(bench.settings.database_url, backlog), daemon=True
                ).start()
                time.sleep(1)
            with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
                next_at = time.monotonic()
                for n in range(rate * seconds):
                    key = f"p0-{n}"
                    started[key] = time.time()
                    conn.execute(
                        "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                        " VALUES (%s, 'u@example.com', 'code', 'p0')",
                        (key,),
                    )
                    returned[key] = time.time()
                    next_at += 1 / rate
                    time.sleep(max(0.0, next_at - time.monotonic()))
            done.set()
            reader.join(90)
    finally:
        bench.close()
    keys = [k for k in started if k in appended and k in times.committed]
    lane = [k for k in keys if times.lane[k] == P0_THREAD]
    after = {k: max(times.wake[k], returned[k]) for k in lane}
    return {
        "insert+commit": [returned[k] - started[k] for k in lane],
        "wake-up": [max(0.0, times.wake[k] - returned[k]) for k in lane],
        "claim": [times.claimed[k] - after[k] for k in lane],
        "produce→ack": [times.acked[k] - times.claimed[k] for k in lane],
        "mark commit": [times.committed[k] - times.acked[k] for k in lane],
        "commit→broker": [appended[k] - returned[k] for k in lane],
        "by a worker": [appended[k] - returned[k] for k in keys if times.lane[k] != P0_THREAD],
        "missing": [float(len(started) - len(keys))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--backlog", type=int, default=0, help="P2 rows draining meanwhile")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    label = f"at {args.rate}/s" + (f", {args.backlog:,} P2 rows draining" if args.backlog else "")
    summary: dict[str, list[float]] = {}
    for run in range(1, args.runs + 1):
        parts = one_run(args.rate, args.seconds, args.backlog)
        workers, missing = parts.pop("by a worker"), int(parts.pop("missing")[0])
        print(f"run {run} ({label}): {len(parts['claim'])} rows by the P0 lane,"
              f" {len(workers)} by a pointer worker, {missing} not seen", flush=True)  # fmt: skip
        if missing:  # a relay that stopped (its log above), or a harness out of step with it
            raise SystemExit(f"{missing} P0 rows never reached the broker")
        if len(parts["claim"]) < 2:  # the lane's child never ran: the workers took them all
            raise SystemExit("the P0 lane published fewer than 2 rows: nothing to measure")
        for part in (*PARTS, "by a worker"):
            samples = [s * 1000 for s in (workers if part == "by a worker" else parts[part])]
            if len(samples) < 2:
                continue
            for q in (50, 99):
                value = percentile(samples, q)
                summary.setdefault(f"{part} p{q}", []).append(value)
                record(f"relay P0 {part} p{q} {label}", value, "ms")
            print(f"  {part:>14}: p50 {percentile(samples, 50):7.2f} ms,"
                  f" p99 {percentile(samples, 99):7.2f} ms", flush=True)  # fmt: skip
    print(f"over {args.runs} runs, min / median / max:")
    for name, values in summary.items():
        print(f"  {name:>18}: {min(values):.2f} / {statistics.median(values):.2f} /"
              f" {max(values):.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
