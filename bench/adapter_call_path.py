"""Per-adapter call path: sends/s of each provider adapter alone (no Kafka, no PostgreSQL)
at ``--in-flight`` sends, and its share of the ``http`` default's figure.

    python bench/adapter_call_path.py [--in-flight 64] [--seconds 5] [--latency-ms 50]
                                      [--runs 3] [--only http,resend,...]

``http``, ``resend``, ``postmark``, ``sendgrid`` and ``mailgun`` call the sandbox's own
dialect of that provider (``mailbus sandbox --latency-ms``, in its own process, so client
and server do not share an interpreter): what differs between them is the adapter's
request building and reply parsing, and the dialect's. ``ses`` calls moto's server mode
through the AWS SDK (boto3 in worker threads); moto answers as fast as it can, with no
added latency, so SES's share is taken over ``http`` against a second sandbox that adds
none either (``http, no added latency``). Each run keeps ``--in-flight`` senders busy for
``--seconds`` after a 1 s warm-up; every send must be accepted. Runs alternate between
adapters, so a noisy moment falls on all.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Callable
from typing import Any

import boto3
from call_path import sends_per_second
from harness import serving
from results import record

from mailbus.consumer.adapter import Provider
from mailbus.consumer.provider import HttpProvider
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.resend.sending import RESEND_WINDOW_S, ResendDialect
from mailbus.providers.sendgrid.sending import SendGridDialect
from mailbus.providers.ses.sending import SesProvider

API_KEY = "bench-key"
SENDER = "shop@mg.example.com"
BARE_HTTP = "http, no added latency"
ADAPTERS = ("http", "resend", "postmark", "sendgrid", "mailgun", "ses")
_DIALECTS: dict[str, Callable[[], Any]] = {
    "http": lambda: None,
    "resend": lambda: ResendDialect(SENDER, RESEND_WINDOW_S),
    "postmark": lambda: PostmarkDialect(SENDER),
    "sendgrid": lambda: SendGridDialect(SENDER),
    "mailgun": lambda: MailgunDialect(SENDER, "mg.example.com"),
}


def adapter(name: str, sandbox: str, moto: str, in_flight: int) -> Provider:
    if name == "ses":
        return SesProvider(
            SENDER,
            region="eu-west-1",
            endpoint_url=moto,
            access_key_id="testing",
            secret_access_key="testing",
            max_connections=in_flight,
        )
    dialect = _DIALECTS[name]()
    return HttpProvider(sandbox, API_KEY, 2.0, 15.0, in_flight, dialect=dialect)


async def measure(name: str, sandbox: str, moto: str, args: argparse.Namespace) -> float:
    provider = adapter(name, sandbox, moto, args.in_flight)
    try:
        return await sends_per_second(provider, args.in_flight, args.seconds, name)
    finally:
        await provider.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(ADAPTERS))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    if unknown := set(names) - set(ADAPTERS):
        parser.error(f"unknown adapters: {sorted(unknown)}")
    sandbox_args = ["mailbus", "sandbox", "--api-key", API_KEY, "--latency-ms"]
    # (label, adapter, whether against the sandbox that adds no latency)
    cases = [(n, n, False) for n in names if n != "ses"]
    if "ses" in names:
        cases += [(BARE_HTTP, "http", True), ("ses", "ses", True)]
    rates: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    with (
        serving([*sandbox_args, str(args.latency_ms), "--port"], "/_sandbox/health") as slow,
        serving([*sandbox_args, "0", "--port"], "/_sandbox/health") as bare,
        serving(["moto.server", "-H", "127.0.0.1", "-p"], "/moto-api/data.json") as moto,
    ):
        if "ses" in names:
            verify_sender(moto)
        for run in range(1, args.runs + 1):
            for label, name, no_latency in cases:
                rate = asyncio.run(measure(name, bare if no_latency else slow, moto, args))
                rates[label].append(rate)
                print(f"run {run}: {label} {rate:,.0f} sends/s at {args.in_flight} in flight")
    for run in range(args.runs):
        for label, _, no_latency in cases:
            figure = rates[label][run]
            record(f"{label} call path at {args.in_flight} in flight", figure, "sends/s")
            base = BARE_HTTP if no_latency else "http"
            if label != base and base in rates:
                share = 100 * figure / rates[base][run]
                record(f"{label} share of the {base} call path", share, "%")
    for label in rates:
        low, mid, high = min(rates[label]), statistics.median(rates[label]), max(rates[label])
        print(f"{label}: min {low:,.0f}  median {mid:,.0f}  max {high:,.0f} sends/s")


def verify_sender(moto: str) -> None:
    """SES sends only from a verified identity: verify the sender, as an account owner."""
    client = boto3.client(
        "sesv2",
        region_name="eu-west-1",
        endpoint_url=moto,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_email_identity(EmailIdentity=SENDER)


if __name__ == "__main__":
    main()
