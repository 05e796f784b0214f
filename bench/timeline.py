"""One mail's walk at a steady rate, stage by stage, and (``--profile DIR``) flame graphs of
the relay and one consumer draining a backlog.

    python3 bench/timeline.py [--rate 200] [--seconds 10] [--latency-ms 50]
                              [--profile docs/benchmarks --backlog 20000 --py-spy PATH]
                              [--cpu] [--top 20]

Nothing is instrumented in the hot paths: each stage's time is one the system records
anyway. ``created_at`` (the enqueue's commit, autocommit), ``published_at`` (the relay's
claim), the broker's append (the topics use LogAppendTime), ``first_tried_at`` (the
consumer's claim), the attempt's ``latency_ms`` (the provider call), ``accepted_at`` (the
settle) and the moment the consumer group's committed offset passed the message (polled
every 5 ms from the group coordinator, without joining the group). The gap between the
append and the claim holds the consumer's poll, the load and the gate; the gap between the
claim and the settle less the call holds the slot and the settle's queue. Prints a table of
p50 / p99 per stage (ms) and records them through bench/results.py.

The profiles sample every thread that is not idle (waits on PostgreSQL or the network
inside a C call count as busy); ``--cpu`` samples only the thread holding the GIL
(py-spy ``--gil``, the process paused for each sample): where the Python CPU goes.
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg
from broker_times import APPEND_TIME
from confluent_kafka import Consumer, TopicPartition
from harness import Bench, percentile
from results import record

from mailbus.kernel.settings import load_settings
from mailbus.schemas.codec import send_pointer_codec

SANDBOX_PORT = 8098
STAGES = (
    ("commit → relay claim", "created", "claimed_by_relay"),
    ("relay claim → broker append", "claimed_by_relay", "appended"),
    ("broker append → consumer claim", "appended", "claimed"),
    ("consumer claim → settled (call included)", "claimed", "settled"),
    ("settled → offset committed", "settled", "committed"),
    ("commit → accepted", "created", "settled"),
    ("commit → offset committed", "created", "committed"),
)


class Appends(threading.Thread):
    """Each pointer's broker append time and offset, read by a group of its own."""

    def __init__(self, bench: Bench, topic: str) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.seen: dict[str, tuple[float, int, int]] = {}  # key -> (append s, partition, offset)
        self._consumer = Consumer(
            {
                "bootstrap.servers": bench.settings.kafka_bootstrap,
                "group.id": uuid.uuid4().hex,
                "auto.offset.reset": "earliest",
            }
        )
        self._consumer.subscribe([topic])

    def run(self) -> None:
        codec = send_pointer_codec()
        while not self.done.is_set():
            message = self._consumer.poll(0.2)
            if message is None or message.error():
                continue
            key = codec.decode(message.value())["dedupe_key"]
            self.seen.setdefault(
                key,
                (message.timestamp()[1] / 1000, message.partition(), message.offset()),
            )
        self._consumer.close()


class Commits(threading.Thread):
    """When the delivery group's committed offset of each partition passed each offset."""

    def __init__(self, bench: Bench, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.moves: dict[int, list[tuple[float, int]]] = {}  # partition -> (when, offset)
        self._topic = topic
        self._partitions = bench.settings.partitions
        self._consumer = Consumer(
            {"bootstrap.servers": bench.settings.kafka_bootstrap, "group.id": group}
        )

    def run(self) -> None:
        partitions = [TopicPartition(self._topic, p) for p in range(self._partitions)]
        while not self.done.is_set():
            now = time.time()
            for tp in self._consumer.committed(partitions, timeout=5):
                moves = self.moves.setdefault(tp.partition, [])
                if tp.offset >= 0 and (not moves or moves[-1][1] != tp.offset):
                    moves.append((now, tp.offset))
            time.sleep(0.005)
        self._consumer.close()

    def committed_at(self, partition: int, offset: int) -> float | None:
        """The first poll that saw a committed offset beyond ``offset``."""
        return next((t for t, o in self.moves.get(partition, []) if o > offset), None)


# The settle clears published_at, so the relay's claim time is kept aside, in this
# benchmark's own database only (one small insert per claimed row, in the relay's claim).
RELAY_CLAIMS = """
CREATE TABLE bench_relay_claims (id bigint PRIMARY KEY, published_at timestamptz);
CREATE FUNCTION bench_relay_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_relay_claims VALUES (NEW.id, NEW.published_at) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_relay_claim AFTER UPDATE OF published_at ON email_sends FOR EACH ROW
    WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL)
    EXECUTE FUNCTION bench_relay_claim();
"""


def steady(bench: Bench, rate: int, seconds: int) -> dict[str, list[float]]:
    with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
        conn.execute(RELAY_CLAIMS)
    topic = bench.settings.topic("p1")
    appends = Appends(bench, topic)
    commits = Commits(bench, topic, f"{bench.settings.topic_prefix}.delivery.p1")
    appends.start()
    commits.start()
    total = rate * seconds
    with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
        next_at = time.monotonic()
        for n in range(total):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES"
                " (%s, 'u@example.com', 'welcome')",
                (f"steady-{n}",),
            )
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    bench.wait_for("dedupe_key LIKE 'steady-%' AND status = 'accepted'", total, interval=0.5)
    time.sleep(2)  # the last offsets commit (every 0.5 s)
    appends.done.set()
    commits.done.set()
    appends.join(10)
    commits.join(10)
    rows = bench.query(
        "SELECT s.dedupe_key, extract(epoch FROM s.created_at), extract(epoch FROM m.published_at),"
        " extract(epoch FROM s.first_tried_at), extract(epoch FROM s.accepted_at)"
        " FROM email_sends s LEFT JOIN bench_relay_claims m ON m.id = s.id"
        " WHERE s.dedupe_key LIKE 'steady-%'"
    )
    stages: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for key, created, published, claimed, settled in rows:
        append = appends.seen.get(key)
        if append is None:
            continue
        at = {
            "created": float(created),
            "claimed_by_relay": float(published) if published is not None else None,
            "appended": append[0],
            "claimed": float(claimed),
            "settled": float(settled),
            "committed": commits.committed_at(append[1], append[2]),
        }
        for name, start, end in STAGES:
            if at[start] is not None and at[end] is not None:
                stages[name].append(at[end] - at[start])  # type: ignore[operator]
    return stages


def top_frames(collapsed: str, shown: int = 20) -> str:
    """py-spy's collapsed stacks (``frame;frame;… count`` lines) as text: the samples by
    library (the first folder of the top frame's file), then the frames with the most
    samples on top of the stack (self) and anywhere in it (inclusive)."""
    total, own, anywhere, library = 0, Counter[str](), Counter[str](), Counter[str]()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames, n = stack.split(";"), int(count)
        total += n
        own[frames[-1]] += n
        library[frames[-1].rpartition("(")[2].split("/")[0].split(":")[0]] += n
        for frame in set(frames):
            anywhere[frame] += n
    lines = [f"{total} samples", "", "self, by library:"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in library.most_common(shown)]
    lines += ["", "self:"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in own.most_common(shown)]
    lines += ["", "inclusive:"]
    lines += [f"{100 * n / total:5.1f}%  {f}" for f, n in anywhere.most_common(shown)]
    return "\n".join(lines) + "\n"


def profile(
    bench: Bench,
    backlog: int,
    out: Path,
    py_spy: str,
    relay: int,
    consumer: int,
    cpu: bool,
    top: int = 20,
) -> None:
    """Flame graphs (SVG) and collapsed stacks of the relay publishing ``backlog`` rows and
    the consumer delivering them, sampled by py-spy: every busy thread without stopping the
    processes, or (``cpu``) the thread holding the GIL."""
    mode = ["--gil"] if cpu else ["--nonblocking"]
    spies = [
        subprocess.Popen(
            [
                py_spy,
                "record",
                *mode,
                "--threads",
                "--pid",
                str(pid),
                "--rate",
                "100",
                "--format",
                fmt,
                "--output",
                str(out / f"profile-{name}.{ext}"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in (("relay", relay), ("consumer", consumer))
        for fmt, ext in (("flamegraph", "svg"), ("raw", "txt"))
    ]
    time.sleep(2)  # attached
    bench.query(
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
        " SELECT 'backlog-' || n, 'u' || n || '@example.com', 'welcome', 'p1'"
        " FROM generate_series(1, %s) n RETURNING 1",
        backlog,
    )
    bench.wait_for("dedupe_key LIKE 'backlog-%' AND status = 'accepted'", backlog, interval=1.0)
    for spy in spies:
        spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
    for spy in spies:
        spy.wait(60)
    for name in ("relay", "consumer"):
        raw = out / f"profile-{name}.txt"
        (out / f"profile-{name}-top.txt").write_text(top_frames(raw.read_text(), top))
        raw.unlink()  # megabytes; the flame graph and the top frames keep what it says


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--profile", type=Path, help="write flame graphs to this folder")
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument("--cpu", action="store_true", help="profile the GIL holder only")
    parser.add_argument("--top", type=int, default=20, help="frames listed in *-top.txt")
    args = parser.parse_args()
    bench = Bench(load_settings(), APPEND_TIME)
    try:
        bench.start(
            "sandbox",
            "--port",
            str(SANDBOX_PORT),
            "--latency-ms",
            str(args.latency_ms),
            "--api-key",
            "bench-key",
        )
        relay = bench.start("relay")
        consumer = bench.start(
            "consume",
            "--priority",
            "p1",
            MAILBUS_PROVIDER_URL=f"http://127.0.0.1:{SANDBOX_PORT}",
            MAILBUS_PROVIDER_API_KEY="bench-key",
            MAILBUS_MAX_IN_FLIGHT=str(args.in_flight),
        )
        time.sleep(5)  # joined the group
        stages = steady(bench, args.rate, args.seconds)
        print(f"one mail at {args.rate}/s for {args.seconds}s, provider {args.latency_ms:.0f} ms")
        print(f"{'stage':<44} {'p50 ms':>8} {'p99 ms':>8} {'n':>6}")
        for name, values in stages.items():
            p50, p99 = percentile(values, 50) * 1000, percentile(values, 99) * 1000
            record(f"timeline {name} p50 at {args.rate}/s", p50, "ms")
            record(f"timeline {name} p99 at {args.rate}/s", p99, "ms")
            print(f"{name:<44} {p50:>8.1f} {p99:>8.1f} {len(values):>6}", flush=True)
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            profile(
                bench,
                args.backlog,
                args.profile,
                args.py_spy,
                relay.pid,
                consumer.pid,
                args.cpu,
                args.top,
            )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
