"""SMTP benchmark: sends/s of the SMTP adapter to a local aiosmtpd at ``--in-flight`` sends.

    python bench/smtp_throughput.py [--in-flight 64] [--seconds 5] [--runs 3]

The server (``python -m aiosmtpd`` with the Sink handler, which accepts and discards)
runs in its own process, so client and server do not share an interpreter. Each run keeps
``--in-flight`` senders busy for ``--seconds`` through one :class:`SmtpProvider` (kept
connections, one mail per transaction: MAIL, RCPT, DATA); every send must be accepted.
Prints each run's sends/s and min/median/max. Needs neither Kafka nor PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time

from call_path import sends_per_second
from harness import free_port
from results import record

from mailbus.providers.smtp.sending import SmtpProvider


async def one_run(url: str, in_flight: int, seconds: float) -> float:
    provider = SmtpProvider(url, "bench@mailbus.example", max_connections=in_flight)
    try:
        return await sends_per_second(provider, in_flight, seconds, "bench")
    finally:
        await provider.aclose()


_SINK = ("-c", "aiosmtpd.handlers.Sink")


def wait_listening(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("aiosmtpd did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}", *_SINK]
    )
    try:
        wait_listening(port)
        rates = []
        for run in range(1, args.runs + 1):
            rate = asyncio.run(one_run(f"smtp://127.0.0.1:{port}", args.in_flight, args.seconds))
            rates.append(rate)
            record(f"SMTP sends/s at {args.in_flight} in flight", rate, "sends/s")
            print(f"run {run}: {rate:,.0f} sends/s at {args.in_flight} in flight")
        print(
            f"SMTP sends/s: min {min(rates):,.0f}  median {statistics.median(rates):,.0f}"
            f"  max {max(rates):,.0f}"
        )
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
