"""The database's clock, read without a round trip of its own.

Times PostgreSQL compares (``next_try_at``, ``expires_at``, leases) must be computed on
PostgreSQL's clock, or a consumer whose clock is skewed sends codes late or burns its
retries at once. The ledger's loads carry ``clock_timestamp()``; :class:`DatabaseClock`
keeps the latest reading and advances it by this process's monotonic clock, which
measures intervals well whatever the wall clock says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["DatabaseClock"]


class DatabaseClock:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._anchor: tuple[datetime, float] | None = None

    def observe(self, database_now: datetime) -> None:
        """Take a ``clock_timestamp()`` the database just returned as the new reference."""
        self._anchor = (database_now, self._monotonic())

    def now(self) -> datetime:
        """The database's time now; this process's wall clock until a first reading."""
        if self._anchor is None:
            return datetime.now(UTC)
        database_now, read_at = self._anchor
        return database_now + timedelta(seconds=self._monotonic() - read_at)
