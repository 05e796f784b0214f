"""The reconciler runs until the stop, whatever one pass raises."""

from __future__ import annotations

import asyncio
from typing import Any

from mailbus.consumer.gate import AdaptiveSlots
from mailbus.consumer.reconciler import Reconciler
from mailbus.consumer.service import Stopping


class _Ledger:
    def __init__(self) -> None:
        self.passes = 0

    async def take_unresolved(self, _priorities: list[str], _limit: int) -> list[Any]:
        self.passes += 1
        if self.passes == 1:
            raise RuntimeError("a bug in the first pass")
        return []

    async def republish_stale(self, _priorities: list[str], _after_s: float) -> int:
        return 0


class _Service:
    def __init__(self) -> None:
        self.ledger = _Ledger()
        self.stopping = asyncio.Event()


def test_a_pass_that_raises_is_logged_and_the_next_pass_runs() -> None:
    async def scenario() -> int:
        service = _Service()
        reconciler = Reconciler(service, ["p1"], AdaptiveSlots(1), interval_s=0.01)  # type: ignore[arg-type]
        running = asyncio.create_task(reconciler.run())
        while service.ledger.passes < 3 and not running.done():
            await asyncio.sleep(0.01)
        service.stopping.set()
        await asyncio.wait_for(running, 5)  # and it ends at the stop, without raising
        return service.ledger.passes

    assert asyncio.run(scenario()) >= 3


class _StoppingService(_Service):
    """A resolution abandoned because the service stops (storage down at SIGTERM)."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger.take_unresolved = _one_row  # type: ignore[method-assign]

    async def resolve(self, _loaded: object, _token: object) -> None:
        self.stopping.set()
        raise Stopping()


def test_a_resolution_abandoned_at_the_stop_ends_the_reconciler_quietly() -> None:
    # Before: Stopping escaped run(), and `mailbus consume` exited non-zero on SIGTERM.
    async def scenario() -> None:
        service = _StoppingService()
        reconciler = Reconciler(service, ["p1"], AdaptiveSlots(1), interval_s=0.01)  # type: ignore[arg-type]
        await asyncio.wait_for(reconciler.run(), 5)

    asyncio.run(scenario())


async def _one_row(_priorities: list[str], _limit: int) -> list[Any]:
    return [(object(), object())]  # every pass finds one unresolved row
