"""Which of one process's pointer workers (relay/workers.py) answers a NOTIFY.

Every worker listens on the same channels, so every new send woke all of them, and at a
light rate each extra worker's pass claimed nothing: a claim, a dead-letter claim and a
commit per worker per send. An outbox notification names the transaction that sent it
(schemas/sql/0075). The first worker to take a notification answers it, and takes with it
the notifications already waiting on its connection; a worker that takes one answered in
the last :data:`FRESH_S` passes it by. The answering worker took it after the sending
transaction committed and claims after that, so its claim sees the rows, unless they are
held by another claim or its own pass fails. So a worker whose claim came back full (more
rows are due than one claim takes: one transaction of thousands, a backlog) or whose pass
failed **releases** the others: every waiting worker of the process makes a pass within a
wait's slice (0.1 s), without a database call. A notification without a name (``dlq
replay``'s, an older trigger's) is answered by every worker, as before. An answer is
forgotten after :data:`FRESH_S`: a name seen again later (a NOTIFY sent by another login,
a transaction id given again after a failover) costs an empty pass at worst, never a wait
for the polling interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FRESH_S", "REMEMBERED", "Standby"]

FRESH_S = 2.0  # an answer older than this is forgotten
REMEMBERED = 4096  # and the oldest beyond this many


class Standby:
    """The notifications the workers of one process have answered lately."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._answered: dict[str, float] = {}  # payload -> when answered, oldest first
        self._releases = 0

    @property
    def releases(self) -> int:
        """How many releases there have been: a waiting worker makes a pass when it changes."""
        return self._releases

    def release(self) -> None:
        """A worker's claim came back full, or its pass failed: the others make a pass."""
        with self._lock:
            self._releases += 1

    def answer(self, payload: str) -> bool:
        """Whether the worker that took the notification ``payload`` claims for it: False
        if another worker answered it lately."""
        if not payload:
            return True
        now = self._clock()
        with self._lock:
            while self._answered:  # oldest first: forget the stale, and past REMEMBERED
                old, answered_at = next(iter(self._answered.items()))
                if now - answered_at < FRESH_S and len(self._answered) < REMEMBERED:
                    break
                del self._answered[old]
            if payload in self._answered:
                return False
            self._answered[payload] = now
            return True
