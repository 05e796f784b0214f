"""The life of one send: its statuses and the transitions between them.

    pending ──► sending ──► accepted                       (terminal)
       │           ├──────► failed ──(DLQ replay only)──► pending
       │           ├──────► expired                        (terminal)
       │           ├──────► unknown ──► sending | accepted | pending | failed | expired
       │           └──────► pending   (a retryable failure, with a later next_try_at)
       ├──► expired | suppressed | failed   (decided before any call, see decide.before_send)
       ├──► accepted | unknown    (a row tried before: that verdict awaits a look-up, whose
       │                           answer may be an earlier acceptance, see confirm_final)
       └──► sending

Every transition is applied by a guarded SQL update (``WHERE status = ANY(<allowed
sources>)``), so this table is the whole concurrency story: a row that is not in a source
status any more belongs to someone else, and the update simply matches nothing.

``failed`` is terminal for delivery: nothing in the consumer ever moves a failed row. The
single edge out of it, ``failed → pending``, exists only for an explicit operator action,
``mailbus dlq replay``, which re-queues a dead letter on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "Status",
    "can_transition",
    "claimable_from",
]


class Status(StrEnum):
    """The ``email_sends.status`` column; the value is the text stored in PostgreSQL."""

    PENDING = "pending"
    """Waiting to be sent, not before ``next_try_at``."""
    SENDING = "sending"
    """Claimed by one consumer, which holds a lease while the provider call is in flight."""
    ACCEPTED = "accepted"
    """The provider accepted it; ``message_id`` is stored in the same update."""
    FAILED = "failed"
    """Rejected for good or out of attempts; the message went to the DLQ."""
    UNKNOWN = "unknown"
    """A call may or may not have been accepted; resolved by a look-up, never a blind send."""
    EXPIRED = "expired"
    """Its ``expires_at`` passed before it could be sent."""
    SUPPRESSED = "suppressed"
    """The address is in ``email_suppressions``; never sent."""


TERMINAL: frozenset[Status] = frozenset(
    {Status.ACCEPTED, Status.FAILED, Status.EXPIRED, Status.SUPPRESSED}
)
"""Statuses the delivery path never leaves (``failed`` only by an explicit DLQ replay)."""

TRANSITIONS: Mapping[Status, frozenset[Status]] = MappingProxyType(
    {
        Status.PENDING: frozenset(
            {
                Status.SENDING,
                Status.EXPIRED,
                Status.SUPPRESSED,
                Status.FAILED,
                Status.ACCEPTED,
                Status.UNKNOWN,
            }
        ),
        Status.SENDING: frozenset(
            {Status.ACCEPTED, Status.FAILED, Status.PENDING, Status.UNKNOWN, Status.EXPIRED}
        ),
        Status.UNKNOWN: frozenset(
            {Status.SENDING, Status.ACCEPTED, Status.PENDING, Status.FAILED, Status.EXPIRED}
        ),
        # Only `mailbus dlq replay` takes this edge; the consumer never does.
        Status.FAILED: frozenset({Status.PENDING}),
        Status.ACCEPTED: frozenset(),
        Status.EXPIRED: frozenset(),
        Status.SUPPRESSED: frozenset(),
    }
)
"""Allowed ``src → {dst}`` moves; a status missing from a set is a move that never happens."""

_CLAIMABLE: tuple[Status, ...] = (Status.PENDING, Status.UNKNOWN)


def can_transition(src: Status, dst: Status) -> bool:
    """Whether a row in ``src`` may be moved to ``dst`` (a self-move is never a transition)."""
    return dst in TRANSITIONS.get(src, frozenset())


def claimable_from() -> tuple[Status, ...]:
    """The statuses a consumer may take a row from: ``pending`` and ``unknown``.

    An ``unknown`` row is resolved first (a look-up at the provider, see
    ``decide.after_lookup``) before anything is sent again.
    """
    return _CLAIMABLE
