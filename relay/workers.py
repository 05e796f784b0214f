"""The pointer lane as several workers in one `mailbus relay` process (issue 21).

One pointer-lane :class:`~mailbus.relay.relay.Relay` is strictly sequential: claim a batch,
publish it, wait for every acknowledgement, commit, and only then claim the next. While it
waits for Kafka, PostgreSQL has nothing to do, and the other way round.
``MAILBUS_RELAY_WORKERS`` workers overlap those waits: each is a pointer-lane ``Relay`` in
a thread of its own, with its own connections, producer and LISTEN, and ``FOR UPDATE SKIP
LOCKED`` hands each its own rows, so one worker claims while another waits for its acks.
A NOTIFY is answered by the first worker to take it (relay/standby.py), so at a light rate
one pass is made per new send, not one per worker.

That is what several relay processes sharing a table already do, so every guarantee of one
relay holds per worker: a crash before a commit rolls that batch's marks back (the rows
are claimed again: at least once onto Kafka), and every claim takes P0 rows first (with
the P0 lane beside them, `mailbus relay`, those due for a second: relay/relay.py). The
event lane, which must keep each send's order, stays one relay (docs/guides/operators.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

from mailbus.kernel.settings import Settings
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.relay.publisher import PointerPublisher
from mailbus.relay.relay import POINTERS, Relay, RelayStats
from mailbus.relay.standby import Standby

__all__ = ["BULK_NICENESS", "PointerWorkers"]

# Added to the workers' threads' niceness while a P0 lane runs beside them: on a busy core
# the lane's process is scheduled first (docs/benchmarks/speed.md).
BULK_NICENESS = 5
log = logging.getLogger("mailbus.relay")


class PointerWorkers:
    """``settings.relay_workers`` pointer-lane relays, run together by :meth:`run`."""

    def __init__(
        self,
        settings: Settings,
        publisher: Callable[[], PointerPublisher] | None = None,
        tracer: Tracer = NOOP,
        p0_lane_apart: bool = False,
    ) -> None:
        """``publisher``: makes each worker's producer; by default the relay's own.
        ``tracer``: the pointers' ``send`` spans. ``p0_lane_apart``: a P0 lane runs beside
        them, so new P0 sends do not wake them."""
        self._yield_to_p0 = p0_lane_apart
        standby = Standby()  # a NOTIFY wakes one waiting worker's pass, not every one's
        self.relays = [
            Relay(
                settings,
                publisher=publisher() if publisher is not None else None,
                lanes=frozenset({POINTERS}),
                component="relay" if n == 1 else f"relay.{n}",  # for /readyz
                tracer=tracer,
                p0_lane_apart=p0_lane_apart,
                standby=standby,
            )
            for n in range(1, settings.relay_workers + 1)
        ]

    def run(self, stop: threading.Event) -> None:
        """Run every worker until ``stop`` is set, the first in the calling thread; return
        once all have closed their connections and flushed their producers. With a P0 lane
        beside them, each worker's thread (the calling one too) runs :data:`BULK_NICENESS`
        nicer: start the lane's process from another thread, or before."""
        threads = [
            threading.Thread(target=self._work, args=(relay, stop), name=f"relay-{n}", daemon=True)
            for n, relay in enumerate(self.relays[1:], 2)
        ]
        for thread in threads:
            thread.start()
        try:
            self._work(self.relays[0], stop)
        finally:
            stop.set()  # the first worker ended (stopped, or failed for good): so do the rest
            for thread in threads:
                thread.join(timeout=60)  # a pass cut short is published again later

    def _work(self, relay: Relay, stop: threading.Event) -> None:
        niceness = _yield_cpu() if self._yield_to_p0 else None
        try:
            relay.run(stop)
        finally:
            if niceness is not None:
                with contextlib.suppress(OSError):  # without CAP_SYS_NICE it stays nicer
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)

    @property
    def stats(self) -> RelayStats:
        """The workers' counts added up."""
        return sum((relay.stats for relay in self.relays), RelayStats())


def _yield_cpu() -> int | None:
    """Raise the calling thread's niceness by :data:`BULK_NICENESS` (Linux keeps one per
    thread); its niceness before, or None where a sandbox refuses (the relay runs on)."""
    thread_id = threading.get_native_id()
    try:
        niceness = os.getpriority(os.PRIO_PROCESS, thread_id)
        os.setpriority(os.PRIO_PROCESS, thread_id, min(19, niceness + BULK_NICENESS))
    except OSError as exc:
        log.warning("pointer workers keep their CPU priority: %s", exc)
        return None
    return niceness
