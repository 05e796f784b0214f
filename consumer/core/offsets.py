"""Which offset of a partition may be committed when work completes out of order.

Messages of one partition are handled concurrently and finish in any order. Kafka's
committed offset means "everything below is done", so per partition we commit only the
lowest offset still in flight (or one past the highest finished, when nothing is in
flight) -- the technique of Confluent's Parallel Consumer, without its offset encoding.
"""

from __future__ import annotations

import heapq

__all__ = ["PartitionProgress"]


class PartitionProgress:
    """Offsets started and finished on one partition; not thread-safe."""

    def __init__(self) -> None:
        self._in_flight: set[int] = set()
        self._heap: list[int] = []  # in-flight offsets, lazily cleaned of finished ones
        self._highest_seen: int | None = None
        self._committed: int | None = None

    def started(self, offset: int) -> None:
        if offset in self._in_flight:
            return
        self._in_flight.add(offset)
        heapq.heappush(self._heap, offset)
        if self._highest_seen is None or offset > self._highest_seen:
            self._highest_seen = offset

    def finished(self, offset: int) -> None:
        self._in_flight.discard(offset)
        while self._heap and self._heap[0] not in self._in_flight:
            heapq.heappop(self._heap)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def committable(self) -> int | None:
        """The offset to commit (the next one to read), or None if nothing new is done."""
        if self._heap:
            candidate: int | None = self._heap[0]
        elif self._highest_seen is not None:
            candidate = self._highest_seen + 1
        else:
            candidate = None
        if candidate is None or (self._committed is not None and candidate <= self._committed):
            return None
        return candidate

    def mark_committed(self, offset: int) -> None:
        if self._committed is None or offset > self._committed:
            self._committed = offset
