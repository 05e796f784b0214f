"""Enqueue latency while `mailbus migrate` waits behind a long transaction (issue 35): the
contract's INSERT, one row per transaction, ``--samples`` times, p50/p99/max, first idle,
then while a session sits idle in a transaction that read ``email_sends`` and ``migrate``
waits to apply 0039 (``ALTER TABLE email_sends ADD COLUMN``, ACCESS EXCLUSIVE for an
instant). Before issue 35, every insert queued behind the ALTER until the transaction
ended; now each try of it waits at most ``--lock-timeout`` and backs off.

Not run by the tests (tests/integration/test_migrate_waits.py asserts that inserts go on);
needs only PostgreSQL (``MAILBUS_DATABASE_URL`` of a role that may create databases).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "client")]  # this checkout first, client included

from mailbus.app.scratch_database import drop_database, schema_as_of  # noqa: E402

ENQUEUE = (
    "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
    " VALUES (%s, 'a@x.org', 't', '{}', 'p1') ON CONFLICT (dedupe_key) DO NOTHING"
)


def _latencies(url: str, samples: int, tag: str) -> list[float]:
    took = []
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(samples):
            started = time.perf_counter()
            conn.execute(ENQUEUE, (f"{tag}-{n}",))
            took.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
    return sorted(took)


def _summary(took: list[float]) -> str:
    def q(p: float) -> float:
        return took[min(len(took) - 1, int(p * len(took)))]

    return f"p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {took[-1]:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--lock-timeout", default="0.05")
    args = parser.parse_args()
    admin_url = os.environ.get("MAILBUS_DATABASE_URL", "postgresql://localhost/mailbus")
    name = f"mailbus_migrate_wait_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    try:
        schema_as_of(url, 38)
        idle = _latencies(url, args.samples, "idle")
        print(f"idle:             {_summary(idle)}")
        with psycopg.connect(url) as reader:
            reader.execute("SELECT 1 FROM email_sends LIMIT 1")  # idle in transaction
            migrate = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mailbus",
                    "migrate",
                    "--skip-topics",
                    "--lock-timeout",
                    args.lock_timeout,
                    "--max-wait",
                    "600",
                ],
                cwd=REPO,
                env={**os.environ, "MAILBUS_DATABASE_URL": url},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2)
            waiting = _latencies(url, args.samples, "waiting")
            assert migrate.poll() is None, "migrate did not wait: nothing was measured"
            reader.rollback()
        migrate.wait(120)
        print(f"migrate waiting:  {_summary(waiting)}")
        print(f"p99 ratio: {waiting[int(0.99 * len(waiting))] / idle[int(0.99 * len(idle))]:.2f}")
    finally:
        drop_database(admin_url, name)


if __name__ == "__main__":
    main()
