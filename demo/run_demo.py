"""The main job end to end on the local stack: `make demo`.

Starts the sandbox email API (with a share of injected faults), the relay, one consumer
per priority and the domain-event intake as real processes; places sample orders whose
confirmation mail is enqueued in the same transaction, and publishes OrderPlaced events
(with duplicates and one malformed) for the intake; waits until every mail is settled;
prints what happened, from the table and from the sandbox's own ledger; stops everything
with SIGTERM.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from mailbus.intake.sample import publish_records, sample_events  # noqa: E402
from mailbus.kernel.errors import InvalidSendError  # noqa: E402
from mailbus.kernel.settings import Settings, load_settings  # noqa: E402
from mailbus.kernel.topics import create_topics  # noqa: E402
from mailbus_client.enqueue import SendRequest, enqueue  # noqa: E402

SANDBOX_PORT = 8025
ORDERS = 300
EVENTS = 50  # OrderPlaced events for the intake, plus 3 duplicates and 1 malformed
FAULTS = [
    "503:share=0.1",
    "429:share=0.05:retry_after=1",
    "drop_after_accept:share=0.03",
    "malformed:share=0.02",
    "422:share=0.02",
    "slow:share=1:ms=20",
]


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "mailbus", *args], cwd=REPO, env=env)


def place_orders(database_url: str, run: str) -> None:
    rng = random.Random(7)
    with psycopg.connect(database_url) as conn:
        conn.execute(  # the business table: the application's, in public
            "CREATE TABLE IF NOT EXISTS public.demo_orders (id text PRIMARY KEY, total numeric)"
        )
        conn.commit()
        for n in range(ORDERS):
            order_id = f"{run}-{n}"
            with conn.transaction():  # the business change and its mail commit together
                conn.execute(
                    "INSERT INTO public.demo_orders VALUES (%s, %s)",
                    (order_id, rng.randint(5, 500)),
                )
                enqueue(
                    conn,
                    SendRequest(
                        f"order-{order_id}-confirmation",
                        f"buyer{n}@example.com",
                        "order_confirmation",
                        {"order_id": order_id},
                        "p1",
                    ),
                )
            if n % 30 == 0:
                enqueue(
                    conn,
                    SendRequest(
                        f"reset-{run}-{n}",
                        f"user{n}@example.com",
                        "password_reset",
                        {"code": f"{rng.randint(0, 999999):06d}"},
                        "p0",
                    ),
                )
                conn.commit()
        # The same order event twice: the dedupe key makes the second a no-op.
        duplicate = enqueue(
            conn,
            SendRequest(
                f"order-{run}-0-confirmation", "buyer0@example.com", "order_confirmation", {}, "p1"
            ),
        )
        conn.commit()
        print(f"re-enqueued order {run}-0: created={duplicate.created} (dedupe key already there)")
        try:
            enqueue(
                conn,
                SendRequest(
                    f"bad-{run}",
                    "victim@example.com\r\nBcc: all@example.com",
                    "newsletter",
                    {},
                    "p2",
                ),
            )
        except InvalidSendError as exc:
            print(f"refused a header-injection attempt before it reached the table: {exc}")


def publish_order_events(settings: Settings, run: str) -> str:
    """OrderPlaced events on the intake topic: event → row → relay → consumer → sandbox."""
    topic = os.environ.get("MAILBUS_INTAKE_TOPIC", "").strip() or "orders.events"
    create_topics(settings, [topic])
    events = sample_events(EVENTS, duplicates=3, malformed=1, run=f"{run}-evt")
    published = publish_records(settings, topic, events)
    print(
        f"published {published} OrderPlaced events to {topic} ({EVENTS} orders,"
        " 3 duplicates, 1 malformed)"
    )
    return topic


def expected_count(database_url: str, run: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends WHERE dedupe_key LIKE %s", (f"%{run}-evt-%",)
        ).fetchone()
    return int(row[0]) if row else 0


def open_count(database_url: str, run: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_sends WHERE dedupe_key LIKE %s"
            " AND status IN ('pending', 'sending', 'unknown')",
            (f"%{run}%",),
        ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    settings = load_settings()
    run = uuid.uuid4().hex[:6]
    env = dict(
        os.environ,
        MAILBUS_PROVIDER_URL=f"http://127.0.0.1:{SANDBOX_PORT}",
        MAILBUS_PROVIDER_API_KEY="demo-key",
        MAILBUS_BACKOFF_BASE="0.5",
        MAILBUS_BACKOFF_CAP="5",
        MAILBUS_REQUEST_TIMEOUT="3",
        MAILBUS_LOG_LEVEL="WARNING",
    )
    fault_args = [arg for spec in FAULTS for arg in ("--fault", spec)]
    processes = [start("sandbox", "--port", str(SANDBOX_PORT), *fault_args, env=env)]
    processes += [start("relay", env=env)]
    processes += [start("consume", "--priority", p, env=env) for p in ("p0", "p1", "p2")]
    processes += [start("intake", env=env)]
    try:
        time.sleep(3)
        started = time.monotonic()
        intake_topic = publish_order_events(settings, run)
        place_orders(settings.database_url, run)
        while time.monotonic() - started < 180 and (
            open_count(settings.database_url, run)
            or expected_count(settings.database_url, run) < EVENTS
        ):
            time.sleep(1)
        print(f"\nall mail settled in {time.monotonic() - started:.1f}s\n")
        with psycopg.connect(settings.database_url) as conn:
            rows = conn.execute(
                "SELECT priority, status, count(*), max(attempts) FROM email_sends"
                " WHERE dedupe_key LIKE %s GROUP BY 1, 2 ORDER BY 1, 2",
                (f"%{run}%",),
            ).fetchall()
            dead = conn.execute(
                "SELECT count(*) FROM email_dead_letters WHERE dedupe_key LIKE %s", (f"%{run}%",)
            ).fetchone()
        print(f"{'priority':<9}{'status':<11}{'rows':>6}{'max attempts':>14}")
        for priority, status, count, attempts in rows:
            print(f"{priority:<9}{status:<11}{count:>6}{attempts:>14}")
        print(f"dead letters: {dead[0] if dead else 0}")
        with psycopg.connect(settings.database_url) as conn:
            intake_rows = expected_count(settings.database_url, run)
            letters = conn.execute(
                "SELECT id, reason, error, original_partition, original_offset"
                " FROM email_dead_letters WHERE reason LIKE 'intake%%'"
                " AND original_topic = %s AND convert_from(original_key, 'UTF8') LIKE %s",
                (intake_topic, f"{run}-evt-%"),
            ).fetchall()
        print(
            f"intake: {EVENTS + 4} events -> {intake_rows} rows (order-{run}-evt-N-confirmation);"
            f" intake dead letters: {len(letters)}"
        )
        for letter_id, reason, error, partition, offset in letters:
            print(
                f"  dead letter {letter_id}: {reason} at {intake_topic}[{partition}]@{offset}:"
                f" {error} (mailbus dlq show {letter_id})"
            )
        with urllib.request.urlopen(f"http://127.0.0.1:{SANDBOX_PORT}/_sandbox/ledger") as reply:
            ledger = json.load(reply)
        keys = {k: v for k, v in ledger["keys"].items() if run in k}
        print(
            f"\nsandbox: {sum(v['requests'] for v in keys.values())} send requests for "
            f"{len(keys)} keys; {sum(v['accepted'] for v in keys.values())} accepted; "
            f"keys accepted more than once: {sum(v['accepted'] > 1 for v in keys.values())}"
        )
        print("outcomes the sandbox injected or served:", ledger["totals"]["outcomes"])
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)


if __name__ == "__main__":
    main()
