"""When a send lane looks up the next retry coming due.

A retry becomes due without a NOTIFY (the consumer's settle sets ``next_try_at`` in an
UPDATE), so a send lane bounds each sleep by the earliest ``next_try_at`` ahead
(``seconds_until_next_due``, one entry of an index a priority since migration 0078; before,
it walked every row due now, 183 ms on average during a 1M campaign). That look-up ran
after every pass that left the table drained: at a steady 200 sends/s, 200 look-ups a
second per lane (docs/benchmarks/speed.md). Now a look-up's answer holds for
:data:`HOLD_S`, or until the retry it found comes due. A lane that sleeps on a held answer
wakes when the hold ends for a pass, which claims a retry that came due meanwhile, and
looks up again; so a retry goes out at most :data:`HOLD_S` later than it did. An idle
lane looks up before each sleep, as before.

A lane that wakes for the retry it found may claim a moment before the database's
``now()`` passes that retry's ``next_try_at`` (its due time once counted from before the
look-up's query, so it woke early by the query's latency; a wall-clock step still can
make it early): its claim takes nothing, and its next look-up, of retries still ahead,
no longer sees it. Such a retry waited for the polling interval. So a due time counts
from the answer, and after a wake for a retry the lane wakes once more when that
look-up's hold ends, for a pass: at most one more claim per retry wake, none while idle.
A pass that waits for Kafka between its claim and its look-up misses a retry coming due
meanwhile in the same way, so the look-up counts retries due since the pass began as due
now (the relay passes that span).
No I/O; time is passed in (monotonic seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["HOLD_S", "NextRetry"]

HOLD_S = 0.1  # how long a look-up's answer holds


@dataclass
class NextRetry:
    """The last look-up's answer: when the earliest retry ahead comes due."""

    hold_s: float = HOLD_S
    looked_up_at: float | None = None
    due_at: float = math.inf  # inf: no retry was ahead
    after_due: bool = False  # the retry the look-up before this one found had come due

    def stale(self, now: float) -> bool:
        """Whether the lane looks up again before it sleeps: never yet, :attr:`hold_s`
        since, or the retry it found has come due (the one after it is not known)."""
        return (
            self.looked_up_at is None
            or now >= self.looked_up_at + self.hold_s
            or now >= self.due_at
        )

    def looked_up(self, now: float, seconds_until_due: float | None) -> None:
        """Record a look-up's answer: seconds until the earliest retry, None if none.
        ``now`` is when the answer came, so the retry is never thought due early."""
        self.after_due = self.due_at <= now
        self.looked_up_at = now
        self.due_at = math.inf if seconds_until_due is None else now + max(0.0, seconds_until_due)

    def wake_at(self) -> float:
        """When a lane that has just looked up wakes: when the retry found comes due, or,
        after a wake for a retry, at the hold's end too, for the pass that claims it
        should the claim before this look-up have come a moment early."""
        return self.held_until() if self.after_due else self.due_at

    def held_until(self) -> float:
        """When a lane sleeping on a held answer wakes for a pass (or the retry it found
        comes due): a retry scheduled since the look-up is then claimed, or looked up."""
        if self.looked_up_at is None:
            raise RuntimeError("held_until() before any look-up")
        return min(self.due_at, self.looked_up_at + self.hold_s)

    def forget(self) -> None:
        """A new connection (a restart, a failover): look up again before the next sleep."""
        self.looked_up_at, self.due_at = None, math.inf
