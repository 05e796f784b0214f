"""Outcome events, pure parts: waves that keep each send's order, publishing them when Kafka
refuses some, the prune and gathering cadences, and the Avro record."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.relay.events import (
    GATHER_S,
    PRUNE_EVERY_S,
    gather_left,
    key_waves,
    prune_due,
    publish_in_key_order,
    send_event_message,
)
from mailbus.relay.publisher import OutgoingMessage, PointerPublisher
from mailbus.schemas.codec import send_event_codec
from mailbus.schemas.send_event import SendEvent

WHEN = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)


def message(key: str, n: int) -> OutgoingMessage:
    return OutgoingMessage(topic="t", key=key.encode(), value=str(n).encode())


class FakeKafka:
    """Acknowledges everything but the values in ``refuse`` (once each); records the
    order in which messages were produced, call by call."""

    def __init__(self, refuse: set[bytes] | None = None) -> None:
        self.refuse = set(refuse or ())
        self.calls: list[list[bytes]] = []

    def publish(self, messages: Sequence[OutgoingMessage], stop: threading.Event) -> list[int]:
        self.calls.append([m.value for m in messages])
        lost = [i for i, m in enumerate(messages) if m.value in self.refuse]
        self.refuse -= {messages[i].value for i in lost}
        return lost


def publish(kafka: FakeKafka, messages: list[OutgoingMessage]) -> list[int]:
    return publish_in_key_order(cast(PointerPublisher, kafka), messages, threading.Event())


def test_waves_hold_the_nth_event_of_each_key() -> None:
    keys = [b"a", b"b", b"a", b"c", b"a", b"b"]
    assert key_waves(keys) == [[0, 1, 3], [2, 5], [4]]
    assert key_waves([]) == []
    assert key_waves([b"x", b"y", b"z"]) == [[0, 1, 2]]  # the usual batch: one wave


@given(st.lists(st.sampled_from([b"a", b"b", b"c", b"d"]), max_size=40))
def test_waves_cover_every_index_once_and_keep_each_keys_order(keys: list[bytes]) -> None:
    waves = key_waves(keys)
    assert sorted(i for wave in waves for i in wave) == list(range(len(keys)))
    for wave in waves:
        assert wave == sorted(wave)
        assert len({keys[i] for i in wave}) == len(wave)  # a key at most once per wave
    position = {i: n for n, wave in enumerate(waves) for i in wave}
    for key in set(keys):
        mine = [i for i, k in enumerate(keys) if k == key]
        assert [position[i] for i in mine] == list(range(len(mine)))


def test_a_keys_next_event_is_produced_only_after_the_one_before_was_acknowledged() -> None:
    messages = [message("a", 0), message("b", 1), message("a", 2), message("a", 3)]
    kafka = FakeKafka()
    assert publish(kafka, messages) == []
    assert kafka.calls == [[b"0", b"1"], [b"2"], [b"3"]]


def test_a_refused_event_holds_back_the_rest_of_its_send_only() -> None:
    messages = [message("a", 0), message("b", 1), message("a", 2), message("b", 3)]
    kafka = FakeKafka(refuse={b"0"})
    assert publish(kafka, messages) == [0, 2]  # a's second never produced
    assert kafka.calls == [[b"0", b"1"], [b"3"]]


def test_a_stop_abandons_the_waves_not_yet_produced() -> None:
    stop = threading.Event()
    kafka = FakeKafka()
    messages = [message("a", 0), message("a", 1)]

    class Stopping(FakeKafka):
        def publish(self, batch: Sequence[OutgoingMessage], _stop: threading.Event) -> list[int]:
            stop.set()
            return kafka.publish(batch, stop)

    failed = publish_in_key_order(cast(PointerPublisher, Stopping()), messages, stop)
    assert failed == [1] and kafka.calls == [[b"0"]]


def test_published_events_are_pruned_every_ten_minutes() -> None:
    assert prune_due(100.0, None)  # at start
    assert not prune_due(100.0 + PRUNE_EVERY_S - 1, 100.0)
    assert prune_due(100.0 + PRUNE_EVERY_S, 100.0)


def test_a_woken_event_lane_waits_out_the_gathering_time_since_its_last_pass() -> None:
    assert gather_left(100.0, None) == 0.0  # its first pass: at once
    assert gather_left(100.0, 100.0) == pytest.approx(GATHER_S)  # woken as its pass ended
    assert gather_left(100.0 + GATHER_S / 4, 100.0) == pytest.approx(GATHER_S * 3 / 4)
    assert gather_left(100.0 + GATHER_S, 100.0) == 0.0
    assert gather_left(200.0, 100.0) == 0.0  # idle for long: at once


def test_an_event_is_keyed_by_its_send_and_reads_back() -> None:
    event = SendEvent(
        event_id=42,
        send_id=7,
        dedupe_key="invoice-1042",
        template="invoice",
        event="delivered",
        status="accepted",
        occurred_at=WHEN,
        delivery_status="delivered",
        message_id="msg-1",
    )
    record = send_event_message(event, "mailbus.send.events", send_event_codec())
    assert record.topic == "mailbus.send.events" and record.key == b"invoice-1042"
    assert record.headers == (("mailbus.event", b"delivered"), ("mailbus.event.id", b"42"))
    assert record.value[:2] == b"\xc3\x01"  # single-object encoding
    assert SendEvent.from_record(send_event_codec().decode(record.value)) == event
