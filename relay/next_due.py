"""When the next retry comes due, looked up at most every :data:`LOOKUP_EVERY_S`.

A retry's ``next_try_at`` sends no NOTIFY, so a send lane sleeps no longer than the time
left until the earliest one. Looking that up before every wait cost a statement per pass,
as much database time as the claims themselves at a steady 200 mails/s. The answer is
kept as a moment: it is looked up again once it is this old or has passed. A retry
scheduled earlier than the kept moment within that time is found at the next wait instead,
as one scheduled while the lane waits always was: no later than the polling interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LOOKUP_EVERY_S", "NextDue"]

LOOKUP_EVERY_S = 0.25


class NextDue:
    def __init__(
        self,
        lookup: Callable[[], float | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``lookup``: seconds until the earliest retry, None if there is none."""
        self._lookup = lookup
        self._clock = clock
        self._looked_up_at: float | None = None
        self._due_at: float | None = None

    def seconds_left(self) -> float | None:
        """Seconds until the earliest retry comes due (0 if it has), None if none waits."""
        now = self._clock()
        stale = self._looked_up_at is None or now - self._looked_up_at >= LOOKUP_EVERY_S
        if stale or (self._due_at is not None and self._due_at <= now):
            left = self._lookup()
            self._looked_up_at = now
            self._due_at = None if left is None else now + max(0.0, left)
        return None if self._due_at is None else max(0.0, self._due_at - now)
