"""`/metrics` of a process started with a database URL shows the outbox as it is."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client import REGISTRY

from mailbus.kernel import metrics
from mailbus.relay.outbox_metrics import OutboxCollector


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def serve() -> Iterator[None]:
    yield
    metrics.stop_metrics_server()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith(
            ("mailbus_outbox_rows", "mailbus_oldest_", "mailbus_send_events_unpublished")
        ):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_outbox_rows_and_oldest_age(database_url: str, serve: None) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            """
            INSERT INTO email_sends (dedupe_key, to_address, template, priority, status,
                                     created_at)
            SELECT 'k' || i, 'u@example.com', 't', p, s, now() - make_interval(secs => age)
            FROM (VALUES (1, 'p0', 'pending', 75), (2, 'p0', 'pending', 5),
                         (3, 'p1', 'unknown', 400), (4, 'p2', 'sending', 30),
                         (5, 'p2', 'accepted', 9000), (6, 'p2', 'failed', 9000))
                 AS seed(i, p, s, age)
            """
        )
    port = free_port()
    metrics.start_metrics_server(port, OutboxCollector(database_url))

    samples = scrape(port)
    assert samples['mailbus_outbox_rows{priority="p0",status="pending"}'] == 2
    assert samples['mailbus_outbox_rows{priority="p1",status="unknown"}'] == 1
    assert samples['mailbus_outbox_rows{priority="p2",status="sending"}'] == 1
    assert samples['mailbus_outbox_rows{priority="p1",status="pending"}'] == 0
    assert len([name for name in samples if name.startswith("mailbus_outbox_rows")]) == 9
    assert samples['mailbus_oldest_open_age_seconds{priority="p0"}'] == pytest.approx(75, abs=5)
    assert samples['mailbus_oldest_open_age_seconds{priority="p1"}'] == pytest.approx(400, abs=5)
    assert samples['mailbus_oldest_open_age_seconds{priority="p2"}'] == pytest.approx(30, abs=5)
    for priority in ("p0", "p1", "p2"):  # its deprecated name, for one more minor version
        old = samples[f'mailbus_oldest_pending_age_seconds{{priority="{priority}"}}']
        assert old == samples[f'mailbus_oldest_open_age_seconds{{priority="{priority}"}}']
    assert samples["mailbus_send_events_unpublished"] == 3  # inserted unknown/accepted/failed

    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET status = 'accepted' WHERE priority = 'p0'")
    samples = scrape(port)  # read at scrape time, not cached
    assert samples['mailbus_outbox_rows{priority="p0",status="pending"}'] == 0
    assert samples['mailbus_oldest_open_age_seconds{priority="p0"}'] == 0
    assert samples["mailbus_send_events_unpublished"] == 5  # and the two p0 rows accepted


def test_database_errors_drop_the_outbox_samples_and_are_counted(serve: None) -> None:
    errors = REGISTRY.get_sample_value("mailbus_outbox_scrape_errors_total") or 0.0
    port = free_port()
    unreachable = f"postgresql://mailbus:mailbus@127.0.0.1:{free_port()}/nothing"
    metrics.start_metrics_server(port, OutboxCollector(unreachable))

    assert scrape(port) == {}
    assert REGISTRY.get_sample_value("mailbus_outbox_scrape_errors_total") == errors + 1


def test_without_a_database_url_no_outbox_query(serve: None) -> None:
    port = free_port()
    metrics.start_metrics_server(port)
    metrics.observe_dead_letter("rejected")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "mailbus_dead_letters_total" in text
    assert "mailbus_outbox_rows" not in text
