"""Parsing webhook bodies into delivery events, and what each event means."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from mailbus.feedback.events import STATUS_RANK, InvalidEventError, parse_event


def body(**fields: Any) -> bytes:
    document: dict[str, Any] = {
        "id": "evt_1",
        "type": "delivered",
        "message_id": "msg_1",
        "occurred_at": "2026-12-01T06:30:00Z",
    }
    document.update(fields)
    return json.dumps({k: v for k, v in document.items() if v is not ...}).encode()


def test_a_delivered_event() -> None:
    event = parse_event(body(provider_extra={"x": 1}))
    assert event.event_id == "evt_1"
    assert event.type == "delivered" and event.delivery_status == "delivered"
    assert event.message_id == "msg_1"
    assert event.occurred_at == datetime(2026, 12, 1, 6, 30, tzinfo=UTC)
    assert event.bounce is None and not event.suppresses


@pytest.mark.parametrize(
    ("fields", "suppresses", "reason"),
    [
        ({"type": "bounced", "bounce": "hard"}, True, "hard_bounce"),
        ({"type": "bounced", "bounce": "soft"}, False, None),
        ({"type": "complained"}, True, "complaint"),
        ({"type": "deferred"}, False, None),
        ({"type": "delivered", "bounce": "hard"}, False, None),  # bounce ignored here
    ],
)
def test_what_suppresses(fields: dict[str, Any], suppresses: bool, reason: str | None) -> None:
    event = parse_event(body(**fields))
    assert event.suppresses is suppresses
    if reason:
        assert event.suppression_reason == reason


def test_offsets_and_naive_times() -> None:
    event = parse_event(body(occurred_at="2026-12-01T08:30:00+02:00"))
    assert event.occurred_at == datetime(2026, 12, 1, 6, 30, tzinfo=UTC)
    naive = parse_event(body(occurred_at="2026-12-01T06:30:00.250"))
    assert naive.occurred_at.tzinfo is not None
    assert naive.occurred_at.utcoffset() == timedelta(0)
    east = parse_event(body(occurred_at="2026-12-01T06:30:00+05:30")).occurred_at
    assert east.tzinfo == timezone(timedelta(hours=5, minutes=30))


def test_ranks_order_ties() -> None:
    ranks = {t: parse_event(body(type=t, bounce="soft")).rank for t in STATUS_RANK}
    assert ranks == {"deferred": 1, "delivered": 2, "dropped": 3, "bounced": 4, "complained": 5}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"not json", "body"),
        (b"\xff\xfe", "body"),
        (b"[]", "body"),
        (b'"x"', "body"),
        (body(type="opened"), "type"),
        (body(type=None), "type"),
        (body(type="bounced"), "bounce"),
        (body(type="bounced", bounce="medium"), "bounce"),
        (body(id=...), "id"),
        (body(id=""), "id"),
        (body(id="   "), "id"),
        (body(id=42), "id"),
        (body(id="a\x00b"), "id"),
        (body(id="x" * 513), "id"),
        (body(message_id=...), "message_id"),
        (body(message_id=None), "message_id"),
        (body(message_id="m\nx"), "message_id"),
        (body(id="a\ud800b"), "id"),  # a lone surrogate: no UTF-8 (nor jsonb) can hold it
        (body(message_id="\udfff"), "message_id"),
        (body(occurred_at=...), "occurred_at"),
        (body(occurred_at="yesterday"), "occurred_at"),
        (body(occurred_at=1780000000), "occurred_at"),
        (body(occurred_at="2026-13-01T00:00:00Z"), "occurred_at"),
    ],
)
def test_malformed_bodies_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidEventError) as caught:
        parse_event(raw)
    assert caught.value.field == field
