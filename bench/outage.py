"""A realistic outage, time compressed: orders keep arriving while the email API is slow
and answers 503; prints the backlog's peak, the time to drain it, the P0 delays, and the
drain time that spare capacity ÷ backlog predicts, and how long the P0 backlog took.

    python bench/outage.py [--compress 10] [--rate-limit 50] [--no-recovery-cap]

6,000 orders an hour (times compress), one in ten a P0 password reset; the provider is capped
by MAILBUS_RATE_LIMIT, so capacity is known; the outage lasts 4 minutes ÷ compress. The
recovery cap runs at its defaults compressed the same way (100/min times compress, a 10-minute
ramp ÷ compress, after an outage of 30 s ÷ compress); ``--no-recovery-cap`` turns it off.
Needs the local stack. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request

import psycopg
from harness import Bench, percentile
from results import record, record_series

from mailbus.kernel.settings import load_settings

SANDBOX_PORT = 8098


def control(plan: dict[str, object]) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{SANDBOX_PORT}/_sandbox/faults",
        data=json.dumps(plan).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()


def arrivals(bench: Bench, per_second: float, stop: threading.Event) -> None:
    with psycopg.connect(bench.settings.database_url, autocommit=True) as conn:
        n, next_at = 0, time.monotonic()
        while not stop.is_set():
            p0 = n % 10 == 0
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " VALUES (%s, %s, %s, %s)",
                (
                    f"o-{n}",
                    f"buyer{n}@example.com",
                    "password_reset" if p0 else "order_confirmation",
                    "p0" if p0 else "p1",
                ),
            )
            n += 1
            next_at += 1 / per_second
            time.sleep(max(0.0, next_at - time.monotonic()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compress", type=float, default=10)
    parser.add_argument("--rate-limit", type=float, default=50)
    parser.add_argument("--before-s", type=float, default=20)
    parser.add_argument("--no-recovery-cap", action="store_true")
    args = parser.parse_args()
    per_second = 6000 / 3600 * args.compress
    outage_s = 240 / args.compress
    bench = Bench(load_settings())
    env = {
        "MAILBUS_PROVIDER_URL": f"http://127.0.0.1:{SANDBOX_PORT}",
        "MAILBUS_PROVIDER_API_KEY": "bench-key",
        "MAILBUS_RATE_LIMIT": str(args.rate_limit),
        "MAILBUS_REQUEST_TIMEOUT": "5",
        "MAILBUS_MAX_ATTEMPTS": "100",
        "MAILBUS_BACKOFF_BASE": "1",
        "MAILBUS_BACKOFF_CAP": "10",
        "MAILBUS_RECOVERY_RATE": "0" if args.no_recovery_cap else f"{100 * args.compress:g}/min",
        "MAILBUS_RECOVERY_RAMP": f"{max(1, round(600 / args.compress))}s",
        "MAILBUS_RECOVERY_AFTER": f"{max(1, round(30 / args.compress))}s",
    }
    stop = threading.Event()
    try:
        bench.start(
            "sandbox", "--port", str(SANDBOX_PORT), "--api-key", "bench-key", "--latency-ms", "30"
        )
        bench.start("relay")
        for priority in ("p0", "p1"):
            bench.start("consume", "--priority", priority, **env)
        time.sleep(3)
        feeder = threading.Thread(target=arrivals, args=(bench, per_second, stop), daemon=True)
        feeder.start()
        samples: list[tuple[float, int]] = []
        open_rows = "status IN ('pending', 'sending', 'unknown')"
        t0 = time.monotonic()
        outage_at, recovered_at = args.before_s, args.before_s + outage_s
        phase = "before"
        while True:
            now = time.monotonic() - t0
            if phase == "before" and now >= outage_at:
                control({"latency_ms": 2000, "faults": [{"kind": "503", "share": 1}]})
                phase = "outage"
            elif phase == "outage" and now >= recovered_at:
                control({"latency_ms": 30, "faults": []})
                phase = "after"
                backlog_until, recovered_db = bench.query(
                    "SELECT max(id), clock_timestamp() FROM email_sends"
                )[0]
            samples.append((now, bench.count(open_rows)))
            if phase == "after" and samples[-1][1] <= 2 * per_second and now > recovered_at + 2:
                drained_at = now
                break
            if now > recovered_at + 600:
                raise TimeoutError("the backlog did not drain in 10 minutes")
            time.sleep(0.5)
        stop.set()
        peak = max(count for _, count in samples)
        (p0_drained,) = bench.query(  # the P0 mail committed before the recovery, all sent
            "SELECT extract(epoch FROM max(accepted_at) - %s) FROM email_sends"
            " WHERE priority = 'p0' AND id <= %s",
            recovered_db,
            backlog_until,
        )[0]
        backlog = ", ".join(
            f"{t - recovered_at:+.0f}s {count}"
            for t, count in samples[:: max(1, int(5 / 0.5))]
            if t >= recovered_at - 1
        )
        spare = args.rate_limit - per_second
        delays = [
            float(d)
            for (d,) in bench.query(
                "SELECT extract(epoch FROM accepted_at - created_at) FROM email_sends"
                " WHERE priority = 'p0' AND status = 'accepted'"
            )
        ]
        record("outage backlog peak", peak, "rows")
        record("outage drain after recovery", drained_at - recovered_at, "s")
        record("outage drain predicted (backlog ÷ spare capacity)", peak / spare, "s")
        record("outage P0 commit→accepted p50", percentile(delays, 50), "s")
        record("outage P0 commit→accepted p99", percentile(delays, 99), "s")
        record_series("outage backlog (s, rows)", samples)
        record_series("outage phases (s)", [outage_at, recovered_at])
        print(
            f"arrivals {per_second:.1f}/s (6,000/h x{args.compress:g}), capacity "
            f"{args.rate_limit:g}/s, outage {outage_s:.0f}s (503 after 2 s)"
        )
        print(
            f"backlog peak {peak} rows; drained {drained_at - recovered_at:.1f}s after recovery;"
            f" spare capacity ÷ backlog predicts {peak / spare:.1f}s"
        )
        cap = "off" if args.no_recovery_cap else env["MAILBUS_RECOVERY_RATE"]
        print(f"recovery cap {cap}; open rows after recovery: {backlog}")
        print(f"P0 backlog drained {max(0.0, float(p0_drained)):.1f}s after recovery")
        print(
            f"P0 commit→accepted: p50 {percentile(delays, 50):.1f}s,"
            f" p99 {percentile(delays, 99):.1f}s over {len(delays)} mails"
        )
    finally:
        stop.set()
        bench.close()


if __name__ == "__main__":
    main()
