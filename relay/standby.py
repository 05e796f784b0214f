"""Which of one process's pointer workers (relay/workers.py) answers a NOTIFY.

Every worker listens on the same channels, so every new send woke all of them, and at a
light rate each extra worker's pass claimed nothing: a claim, a dead-letter claim and a
commit per worker per send. An outbox notification names the transaction that sent it
(schemas/sql/0075). The first worker to take a notification answers it; a worker that
takes one already answered passes it by. That is safe: the answering worker took it after
the sending transaction committed and claims after that, so its claim sees the rows (or
another claim that holds them publishes them). A notification without a name (``dlq
replay``'s, or an older trigger's) is answered by every worker, as before.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["Standby"]

REMEMBERED = 4096  # the last notifications answered; one older than these is answered again


class Standby:
    """The notifications the workers of one process have answered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: set[str] = set()
        self._order: deque[str] = deque()

    def answer(self, payload: str) -> bool:
        """Whether the worker that took the notification ``payload`` claims for it: False
        if another worker already answered it."""
        if not payload:
            return True
        with self._lock:
            if payload in self._answered:
                return False
            self._answered.add(payload)
            self._order.append(payload)
            if len(self._order) > REMEMBERED:
                self._answered.discard(self._order.popleft())
            return True
