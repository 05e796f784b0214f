"""The database's clock as the consumer sees it: the last reading, advanced monotonically."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mailbus.consumer.db_clock import DatabaseClock


def test_the_last_reading_advances_by_the_monotonic_clock_whatever_the_wall_says() -> None:
    ticks = iter([100.0, 102.5, 107.0, 107.0])
    clock = DatabaseClock(monotonic=lambda: next(ticks))
    database_now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # far from this machine's wall
    clock.observe(database_now)  # read at 100.0
    assert clock.now() == database_now + timedelta(seconds=2.5)
    later = database_now + timedelta(seconds=6)
    clock.observe(later)  # read at 107.0
    assert clock.now() == later


def test_before_any_reading_the_wall_clock_stands_in() -> None:
    assert abs((DatabaseClock().now() - datetime.now(UTC)).total_seconds()) < 1
