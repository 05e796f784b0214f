"""What the sandbox says happened to a mail it accepted: delivery events, pure.

For each newly accepted message one roll decides: a ``bounce_share`` of mail bounces
(hard for a ``hard_share`` of those, else soft); the rest is delivered, and a
``complaint_share`` of delivered mail is then complained about (one second later). Event
ids derive from the message id, so emitting the same outcome twice is harmless at the
receiver. A ``duplicate_share`` of events is posted a second time (:func:`posting_order`), as
providers deliver at least once. Randomness and time are passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["OutcomePlan", "outcome_events", "posting_order"]


@dataclass(frozen=True)
class OutcomePlan:
    delay_ms: float = 200.0  # after acceptance, before the first event is sent
    bounce_share: float = 0.0
    hard_share: float = 0.5  # of bounces
    complaint_share: float = 0.0  # of delivered mail
    duplicate_share: float = 0.0  # of events, posted twice

    def __post_init__(self) -> None:
        for name in ("bounce_share", "hard_share", "complaint_share", "duplicate_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within 0..1, got {value}")
        if not 0.0 <= self.delay_ms < float("inf"):
            raise ValueError(f"delay_ms must be a finite number >= 0, got {self.delay_ms}")


def outcome_events(
    message_id: str, plan: OutcomePlan, rng: random.Random, now: datetime
) -> list[dict[str, Any]]:
    """The events (webhook bodies) of one accepted message, in the order they happen."""

    def event(n: int, kind: str, at: datetime, **extra: str) -> dict[str, Any]:
        return {
            "id": f"sandbox-{message_id}-{n}",
            "type": kind,
            "message_id": message_id,
            "occurred_at": at.isoformat(),
            **extra,
        }

    if rng.random() < plan.bounce_share:
        bounce = "hard" if rng.random() < plan.hard_share else "soft"
        return [event(1, "bounced", now, bounce=bounce)]
    events = [event(1, "delivered", now)]
    if rng.random() < plan.complaint_share:
        events.append(event(2, "complained", now + timedelta(seconds=1)))
    return events


def posting_order(
    events: list[dict[str, Any]], plan: OutcomePlan, rng: random.Random
) -> list[dict[str, Any]]:
    """``events`` as they are posted: each followed by itself again for a
    ``duplicate_share`` of them (the same event id: the receiver applies it once)."""
    posted = []
    for event in events:
        posted.append(event)
        if plan.duplicate_share and rng.random() < plan.duplicate_share:
            posted.append(event)
    return posted
