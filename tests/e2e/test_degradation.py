"""Degradation policies during a provider outage, metrics, and what the logs may not say."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from datetime import UTC, datetime, timedelta

from e2e_stack import API_KEY, Stack
from relay_runner import wait_until

from mailbus.sandbox.server import start_in_thread


def seed_templates(stack: Stack, template: str, count: int, **columns: object) -> None:
    stack.seed(count, prefix=template, template=template, **columns)


def test_policies_during_an_outage(stack: Stack) -> None:
    fallback = start_in_thread(port=0, api_key="fallback-key-0123456789")
    try:
        stack.set_faults({"kind": "503", "share": 1})
        stack.start_relay()
        stack.start_consumer(
            MAILBUS_FALLBACK_PROVIDER_URL=fallback.url,
            MAILBUS_FALLBACK_PROVIDER_API_KEY="fallback-key-0123456789",
            MAILBUS_MAX_ATTEMPTS="50",
        )
        seed_templates(stack, "order_confirmation", 5)
        wait_until(
            lambda: stack.query(  # the primary's; the fallback's is the process's /fallback row
                "SELECT state FROM provider_health WHERE process NOT LIKE '%%/fallback'"
            )
            == [("open",)],
            30,
            "the primary's breaker to open",
        )
        seed_templates(stack, "internal_alert", 3)
        seed_templates(stack, "newsletter", 3, priority="p2")
        seed_templates(
            stack,
            "password_reset",
            2,
            priority="p0",
            expires_at=datetime.now(UTC) + timedelta(seconds=3),
        )
        wait_until(lambda: stack.statuses()["accepted"] == 3, 30, "alerts via the fallback")
        time.sleep(4)  # the password resets expire meanwhile
        stack.set_faults()
        assert stack.wait_settled(90) == {"accepted": 11, "expired": 2}
        stack.assert_table_agrees_with_providers(fallback.url)
    finally:
        fallback.stop()
    rows = stack.query(
        "SELECT template, provider, accepted_at FROM email_sends WHERE status = 'accepted'"
    )
    assert {t for t, p, _ in rows if p == "fallback:http"} == {"internal_alert"}
    assert all(p is None for t, p, _ in rows if t != "internal_alert")
    orders = [at for t, _, at in rows if t == "order_confirmation"]
    newsletters = [at for t, _, at in rows if t == "newsletter"]
    assert min(newsletters) > max(orders), "campaign mail resumed before transactional mail"
    assert [k for k, v in stack.ledger()["keys"].items() if "internal_alert" in k] == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_metrics_and_logs(stack: Stack) -> None:
    port = free_port()
    stack.set_faults({"kind": "422", "next": 2}, {"kind": "503", "next": 3})
    stack.seed(20)
    stack.start_relay(MAILBUS_LOG_LEVEL="DEBUG")
    stack.start_consumer(MAILBUS_METRICS_PORT=str(port), MAILBUS_LOG_LEVEL="DEBUG")
    assert stack.wait_settled(60) == {"accepted": 18, "failed": 2}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        exposition = reply.read().decode()
    assert re.search(r'mailbus_sends_total\{outcome="accepted",priority="p1"\} 18', exposition)
    assert re.search(r'mailbus_dead_letters_total\{reason="rejected"\} 2', exposition)
    stack.assert_table_agrees_with_providers()
    assert "mailbus_provider_latency_seconds_bucket" in exposition
    assert "mailbus_in_flight_limit" in exposition
    stack.stop_all()
    logs = "".join(path.read_text() for path in stack.logs.glob("*.log"))
    assert "sending k-" in logs, "nothing logged an address: the check below proves nothing"
    assert API_KEY not in logs
    assert re.findall(r"[\w.+-]{2,}@example\.com", logs) == []  # only masked: k***@example.com
