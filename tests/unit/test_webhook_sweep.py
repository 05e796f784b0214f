"""The webhooks' sweep (feedback/server.py) outlives a pass that fails for any reason: a
task that ended would leave late and kept events unapplied, and tokens unpruned, until a
restart."""

from __future__ import annotations

import asyncio

from mailbus.feedback.server import _sweep
from mailbus.feedback.store import LateEvents


class _FailingOnce:
    """A store whose first pass meets a bug, not an outage."""

    def __init__(self) -> None:
        self.passes = 0
        self.pruned = 0

    async def apply_late_events(self) -> LateEvents:
        self.passes += 1
        if self.passes == 1:
            raise AssertionError("a kept event this build cannot read")
        return LateEvents(applied=0, updated=0, suppressed=0)

    async def prune_tokens(self, kept_s: float) -> None:
        self.pruned += 1


def test_a_pass_that_fails_leaves_the_sweep_running() -> None:
    async def scenario() -> tuple[int, int, bool]:
        store = _FailingOnce()
        sweeping = asyncio.create_task(_sweep(store, 0.01, 60.0))  # type: ignore[arg-type]
        while store.passes < 3 and not sweeping.done():
            await asyncio.sleep(0.01)
        running = not sweeping.done()
        sweeping.cancel()
        return store.passes, store.pruned, running

    passes, pruned, running = asyncio.run(scenario())
    assert running and passes >= 3 and pruned >= 2
