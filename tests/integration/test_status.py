"""`mailbus status` over seeded rows: depth, oldest age, what is not yet on Kafka, failure
and 429 rates, dead letters not replayed, and breaker states from ``provider_health``."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
import pytest
from services import REPO, run_mailbus

from mailbus.app.status import collect_status, render_status

_SEND = """
INSERT INTO email_sends (dedupe_key, to_address, template, priority, status, created_at)
VALUES (%s, 'user@example.com', 't', %s, %s, now() - make_interval(secs => %s))
RETURNING id
"""
_ATTEMPT = """
INSERT INTO email_attempts (send_id, attempt, outcome, status_code, latency_ms, at)
VALUES (%s, 1, %s, %s, 20, now() - make_interval(secs => %s))
"""
_DEAD_LETTER = """
INSERT INTO email_dead_letters (send_id, dedupe_key, priority, reason, replayed_at)
VALUES (%s, %s, 'p1', %s, CASE WHEN %s THEN now() END)
"""
# What migration 0006 creates; IF NOT EXISTS in case it already has.
_PROVIDER_HEALTH = """
CREATE TABLE IF NOT EXISTS provider_health (
    process text PRIMARY KEY, provider text NOT NULL, state text NOT NULL,
    changed_at timestamptz NOT NULL, updated_at timestamptz NOT NULL)
"""


def seed(database_url: str) -> None:
    """p0: 2 pending (oldest 90 s); p1: 1 sending (30 s), 1 unknown (600 s), 3 accepted,
    1 failed; p2: 4 pending (oldest 7,200 s). Attempts: 5 min: 20 calls, 2 failed,
    five 429s; 15 min adds 10 calls, 3 failed, no 429; older ones are ignored."""
    counter = iter(range(1_000_000))

    with psycopg.connect(database_url) as conn:

        def send(priority: str, status: str, age_s: float) -> int:
            row = conn.execute(_SEND, (f"k{next(counter)}", priority, status, age_s)).fetchone()
            assert row is not None
            return int(row[0])

        for age in (90, 10):
            send("p0", "pending", age)
        send("p1", "sending", 30)
        send("p1", "unknown", 600)
        accepted = [send("p1", "accepted", 3000) for _ in range(3)]
        failed = send("p1", "failed", 3000)
        for age in (7200, 100, 50, 5):
            send("p2", "pending", age)

        target = accepted[0]
        calls: list[tuple[str, int | None, float]] = (
            [("accepted", 202, 60)] * 13
            + [("failed", 422, 120)] * 2
            + [("pending", 429, 200)] * 5
            + [("accepted", 200, 400)] * 7  # 5-15 min ago
            + [("failed", 400, 800)] * 3
            + [("failed", 500, 1200)] * 4  # older than 15 min
            + [("pending", 429, 3600)] * 4
        )
        for outcome, code, age_s in calls:
            conn.execute(_ATTEMPT, (target, outcome, code, age_s))

        for i, (reason, replayed) in enumerate(
            [("rejected", False), ("rejected", False), ("max_attempts", False), ("rejected", True)]
        ):
            conn.execute(_DEAD_LETTER, (failed, f"dl{i}", reason, replayed))


def test_collect_status(database_url: str) -> None:
    seed(database_url)
    status = collect_status(database_url)

    assert status["by_priority"] == {
        "p0": {"pending": 2},
        "p1": {"sending": 1, "unknown": 1, "accepted": 3, "failed": 1},
        "p2": {"pending": 4},
    }
    oldest = status["oldest_open_age_s"]
    assert oldest["p0"] == pytest.approx(90, abs=5)
    assert oldest["p1"] == pytest.approx(600, abs=5)
    assert oldest["p2"] == pytest.approx(7200, abs=5)
    assert status["not_yet_on_kafka"] == 6
    assert status["send_events_unpublished"] == 5  # p1's unknown, accepted and failed rows
    assert status["failed"] == 1
    assert status["provider_calls"] == {
        "5m": {
            "calls": 20,
            "failures": 2,
            "failure_rate": 0.1,
            "http_429": 5,
            "rate_429": 0.25,
        },
        "15m": {
            "calls": 30,
            "failures": 5,
            "failure_rate": pytest.approx(5 / 30, abs=1e-4),
            "http_429": 5,
            "rate_429": pytest.approx(5 / 30, abs=1e-4),
        },
    }
    assert status["dead_letters"] == {
        "not_replayed": 3,
        "by_reason": {"rejected": 2, "max_attempts": 1},
    }
    assert status["breakers"] is None or status["breakers"] == []


def test_an_empty_database(database_url: str) -> None:
    status = collect_status(database_url)
    assert status["by_priority"] == {}
    assert status["oldest_open_age_s"] == {}
    assert status["provider_calls"]["5m"] == {
        "calls": 0,
        "failures": 0,
        "failure_rate": None,
        "http_429": 0,
        "rate_429": None,
    }
    assert status["dead_letters"] == {"not_replayed": 0, "by_reason": {}}
    assert status["send_events_unpublished"] == 0
    text = "\n".join(render_status(status))
    assert "dead letters not replayed: 0" in text


def test_breakers_from_provider_health(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(_PROVIDER_HEALTH)
        conn.execute(
            """
            INSERT INTO provider_health (process, provider, state, changed_at, updated_at) VALUES
                ('host-a:101', 'sandbox', 'open', now() - interval '150 seconds', now()),
                ('host-b:202', 'sandbox', 'closed', now() - interval '1 hour',
                    now() - interval '5 seconds'),
                ('host-c:303', 'sandbox', 'open', now() - interval '2 hours',
                    now() - interval '10 minutes')
            """
        )
    breakers = collect_status(database_url)["breakers"]
    assert [(b["process"], b["state"]) for b in breakers] == [
        ("host-a:101", "open"),
        ("host-b:202", "closed"),
    ]  # host-c stopped reporting: not shown
    assert breakers[0]["since_s"] == pytest.approx(150, abs=5)
    assert breakers[0]["provider"] == "sandbox"
    text = "\n".join(render_status(collect_status(database_url)))
    assert "host-a:101" in text
    assert "open" in text
    assert "host-c:303" not in text


def run_status(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "MAILBUS_DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO),
    }
    return run_mailbus("status", *args, env=env)


def test_cli_json(database_url: str) -> None:
    seed(database_url)
    done = run_status(database_url, "--json")
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    assert status["by_priority"]["p2"] == {"pending": 4}
    assert status["provider_calls"]["5m"]["rate_429"] == 0.25
    assert status["dead_letters"]["not_replayed"] == 3


def test_cli_table(database_url: str) -> None:
    seed(database_url)
    done = run_status(database_url)
    assert done.returncode == 0, done.stderr
    table = done.stdout.splitlines()
    for priority in ("p0", "p1", "p2"):
        assert any(line.startswith(priority) for line in table), done.stdout
    p1 = next(line for line in table if line.startswith("p1"))
    assert p1.split()[1:8] == ["0", "1", "1", "3", "1", "0", "0"]
    assert p1.split()[-1] == "10m"
    assert any("last 5m" in line and "10.0%" in line and "25.0%" in line for line in table)
    assert "dead letters not replayed: 3 (rejected 2, max_attempts 1)" in done.stdout
    assert "not yet on Kafka: 6 sends, 5 outcome events   failed: 1" in done.stdout
