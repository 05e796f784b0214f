"""Resolves what has no known outcome, so nothing stays stuck.

Each pass takes (with a fresh lease) the rows of our priorities that are ``unknown`` and
due, or ``sending`` with a lapsed lease (their consumer crashed or hung), and resolves
each by looking its dedupe key up at the provider -- never by a blind new send. Now and
then it also hands pending rows whose pointer was published long ago back to the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from mailbus.consumer.gate import AdaptiveSlots
from mailbus.consumer.service import DeliveryService, Stopping
from mailbus.kernel.errors import StorageError

__all__ = ["Reconciler"]

log = logging.getLogger("mailbus.reconciler")


class Reconciler:
    def __init__(
        self,
        service: DeliveryService,
        priorities: Sequence[str],
        slots: AdaptiveSlots,
        interval_s: float = 1.0,
        republish_after_s: float = 3600.0,
        batch: int = 100,
    ) -> None:
        self._service = service
        self._priorities = list(priorities)
        self._slots = slots
        self._interval_s = interval_s
        self._republish_after_s = republish_after_s
        self._batch = batch
        self.resolved = 0

    async def run(self) -> None:
        """Pass after pass until the service stops. A failed pass is logged and the next
        one runs: nothing ends the reconciler but the stop (a bug in one pass must not
        leave unknown outcomes unresolved for the life of the process)."""
        last_republish = 0.0
        while not self._service.stopping.is_set():
            try:
                await self.resolve_once()
                if time.monotonic() - last_republish > self._republish_after_s / 10:
                    count = await self._service.ledger.republish_stale(
                        self._priorities, self._republish_after_s
                    )
                    if count:
                        log.warning(
                            "handed %d long-published pending rows back to the relay", count
                        )
                    last_republish = time.monotonic()
            except Stopping:
                return  # a resolution abandoned by the stop: its lease lapses, it is taken again
            except StorageError as exc:
                log.warning("reconciler pass failed: %s", exc)
            except Exception:
                log.exception("reconciler pass failed unexpectedly")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._service.stopping.wait(), self._interval_s)

    async def resolve_once(self) -> int:
        taken = await self._service.ledger.take_unresolved(self._priorities, self._batch)

        async def resolve_one(index: int) -> None:
            loaded, token = taken[index]
            async with self._slots:
                await self._service.resolve(loaded, token)

        await asyncio.gather(*(resolve_one(i) for i in range(len(taken))))
        if taken:
            log.info("resolved %d sends with unknown outcome", len(taken))
        self.resolved += len(taken)
        return len(taken)
