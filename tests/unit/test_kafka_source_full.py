"""A consumer whose in-flight budget is full waits for a finished message: its Kafka thread
neither spins (it woke every 5 ms, taking the GIL from the handlers) nor misses the finish
that makes room."""

from __future__ import annotations

import asyncio
import threading
import time

from mailbus.consumer.kafka_source import KafkaSource
from mailbus.consumer.ledger import MessageOrigin


class _Done:
    """A finished handler task, as KafkaSource._finished sees one."""

    def cancelled(self) -> bool:
        return False

    def exception(self) -> None:
        return None


async def _never(_origin: MessageOrigin) -> None:
    raise AssertionError("no message is polled while the budget is full")


def test_a_full_source_sleeps_until_a_message_finishes() -> None:
    stop = threading.Event()
    loop = asyncio.new_event_loop()
    source = KafkaSource(
        client_config={"bootstrap.servers": "127.0.0.1:1"},  # nothing there: never assigned
        group_id="full-source",
        topic="full-source",
        handler=_never,
        loop=loop,
        max_outstanding=4,
        drain_s=0.1,
        stop=stop,
    )
    source._outstanding = 4  # the budget is full
    counts = 0
    room = source._room

    def counted_room() -> int:
        nonlocal counts
        counts += 1
        return room()

    source._room = counted_room  # type: ignore[method-assign]
    source.start()
    try:
        time.sleep(1.0)
        idle_wakeups = counts
        assert idle_wakeups <= 15  # once per 0.1 s at most (it was every 5 ms: ~200)
        source._outstanding = 4 + 1  # _finished takes one off: still full, but it looks again
        before = counts
        source._finished(MessageOrigin("full-source", 0, 0), _Done())  # type: ignore[arg-type]
        time.sleep(0.02)
        assert counts > before  # woken by the finish, not by the 0.1 s bound
    finally:
        stop.set()
        source.join(10)
        loop.close()
