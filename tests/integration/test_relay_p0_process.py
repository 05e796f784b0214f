"""The P0 lane in a process of its own (relay/p0_process.py, issue 37): it publishes P0 rows
alone, its readiness and metrics reach the parent, and a child killed with SIGKILL is
noticed (unready) and started again."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from relay_runner import running, wait_until

from mailbus.kernel import health
from mailbus.kernel.metrics import RELAY_PUBLISHED
from mailbus.kernel.settings import Settings
from mailbus.relay.p0_process import COMPONENT, P0LaneProcess


def insert_sends(database_url: str, prefix: str, priorities: tuple[str, ...]) -> None:
    with psycopg.connect(database_url) as conn:
        for n, priority in enumerate(priorities):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " VALUES (%s, 'a@example.com', 'welcome', %s)",
                (f"{prefix}{n}", priority),
            )


def published(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT priority, count(*) FROM email_sends WHERE published_at IS NOT NULL"
            " GROUP BY priority"
        ).fetchall()
    return {priority: int(count) for priority, count in rows}


def lane_state() -> dict[str, object]:
    return health.readiness()[1].get(COMPONENT, {"ready": False, "detail": "absent"})


@contextmanager
def p0_lane(settings: Settings) -> Iterator[P0LaneProcess]:
    stop = threading.Event()
    lane = P0LaneProcess(settings)
    thread = threading.Thread(target=lane.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: lane_state()["ready"] is True, 60, "the P0 lane's process ready")
        yield lane
    finally:
        pid = lane.pid
        stop.set()
        thread.join(90)
        assert not thread.is_alive()
        assert pid is None or not running(pid)  # the child ended with the lane


def test_the_p0_lane_process_publishes_p0_rows_alone_and_reports_to_its_parent(
    settings: Settings,
) -> None:
    counted = RELAY_PUBLISHED.labels("p0")._value.get()
    with p0_lane(settings) as lane:
        assert lane.pid is not None and lane.pid != os.getpid()
        insert_sends(settings.database_url, "k-", ("p0", "p1", "p2") * 5)
        wait_until(lambda: lane.stats.published == 5, 30, "five P0 rows published")
        assert published(settings.database_url) == {"p0": 5}
        # the child's observations, counted by the parent's /metrics
        wait_until(lambda: RELAY_PUBLISHED.labels("p0")._value.get() == counted + 5, 10, "metrics")
    assert lane.stats.published == 5
    assert lane_state() == {"ready": False, "detail": "stopping"}


def test_a_killed_p0_lane_process_is_noticed_and_started_again(settings: Settings) -> None:
    with p0_lane(settings) as lane:
        first = lane.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(
            lambda: "exited with code -9" in str(lane_state()["detail"]), 30, "/readyz unready"
        )
        assert lane_state()["ready"] is False
        wait_until(
            lambda: lane.pid not in (None, first) and lane_state()["ready"] is True,
            60,
            "a new child, ready",
        )
        assert lane.restarts == 1
        insert_sends(settings.database_url, "after-", ("p0",))
        wait_until(lambda: published(settings.database_url) == {"p0": 1}, 30, "published")
