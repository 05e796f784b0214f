"""The sandbox's delivery outcomes: shares, ids derived from the message id, order."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from mailbus.feedback.events import parse_event
from mailbus.sandbox.outcomes import OutcomePlan, outcome_events, posting_order

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def test_everything_delivered_by_default() -> None:
    events = outcome_events("m1", OutcomePlan(), random.Random(1), NOW)
    assert events == [
        {
            "id": "sandbox-m1-1",
            "type": "delivered",
            "message_id": "m1",
            "occurred_at": NOW.isoformat(),
        }
    ]


def test_shares_over_many_messages() -> None:
    plan = OutcomePlan(bounce_share=0.2, hard_share=0.5, complaint_share=0.1)
    rng = random.Random(7)
    kinds: dict[str, int] = {}
    for n in range(10_000):
        events = outcome_events(f"m{n}", plan, rng, NOW)
        for event in events:
            key = event["type"] + (f":{event['bounce']}" if "bounce" in event else "")
            kinds[key] = kinds.get(key, 0) + 1
        if events[-1]["type"] == "complained":
            assert [e["type"] for e in events] == ["delivered", "complained"]
            assert events[1]["occurred_at"] > events[0]["occurred_at"]
        for event in events:  # every body is one the receiver takes
            assert parse_event(json.dumps(event).encode()).message_id == f"m{n}"
    assert kinds["bounced:hard"] == pytest.approx(1000, rel=0.15)
    assert kinds["bounced:soft"] == pytest.approx(1000, rel=0.15)
    assert kinds["delivered"] == pytest.approx(8000, rel=0.05)
    assert kinds["complained"] == pytest.approx(800, rel=0.15)


@pytest.mark.parametrize(
    "fields",
    [{"bounce_share": 1.5}, {"hard_share": -0.1}, {"complaint_share": 2}, {"delay_ms": -1}],
)
def test_bad_plans_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        OutcomePlan(**fields)


def test_a_duplicate_share_of_events_is_posted_twice_in_place() -> None:
    events = [{"id": "a"}, {"id": "b"}]
    rng = random.Random(1)
    assert posting_order(events, OutcomePlan(), rng) == events
    assert rng.random() == random.Random(1).random()  # no share: the dice are not touched
    twice = posting_order(events, OutcomePlan(duplicate_share=1.0), random.Random(1))
    assert [e["id"] for e in twice] == ["a", "a", "b", "b"]
