"""When a pointer worker's pass claims dead letters as well as sends.

A pass claimed sends and then dead letters, the second a transaction of its own (BEGIN, an
UPDATE that found nothing, COMMIT) on every wake-up: at a steady rate, one per send. An
outbox notification says which table it is of (schemas/sql/0077: a dead letter's payload
begins :data:`DEAD_LETTER`), so a pass woken by new sends alone skips the dead letters, as
long as its worker's last claim of them left none behind (it took less than a batch, Kafka
acknowledged each, it did not fail) and is at most a polling interval old. Every other pass
claims both: after a dead letter's notification, one without a name (``dlq replay``'s, a
release by another worker), the polling interval, a full batch, a reconnect; a pass at a
retry's time counts as one for sends. So while sends keep waking a worker, a dead letter
whose notification went to a pass that failed is published within a polling interval, not
once the sends stop. No I/O; time is passed in (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEAD_LETTER", "DeadLetterClaims", "may_name_dead_letters"]

DEAD_LETTER = "dead-letter:"  # how a dead letter's notification begins (schemas/sql/0077)


def may_name_dead_letters(payloads: Sequence[str]) -> bool:
    """Whether notifications with these payloads may be of dead letters: one says so, or
    has no name (``dlq replay``'s, a release) and may be of anything."""
    return any(not payload or payload.startswith(DEAD_LETTER) for payload in payloads)


@dataclass
class DeadLetterClaims:
    """One worker's last claim of dead letters that left none behind."""

    interval_s: float  # the lane's polling interval
    left_none_at: float | None = None  # None: none yet, or the last claim left some

    def due(self, now: float, sends_alone: bool) -> bool:
        """Whether the pass about to begin claims dead letters. ``sends_alone``: it was
        begun for sends alone (notifications of new sends, a retry's time)."""
        if not sends_alone or self.left_none_at is None:
            return True
        return now >= self.left_none_at + self.interval_s

    def left_none(self, began_at: float) -> None:
        """A claim that began at ``began_at`` took less than a batch and Kafka acknowledged
        each one: every dead letter committed before it is published."""
        self.left_none_at = began_at

    def forget(self) -> None:
        """A claim begins (until it ends well, every pass claims), or the connection was
        lost (its notifications with it)."""
        self.left_none_at = None
