"""Group commit for single-item calls: many concurrent ``submit(item)`` become one batch.

Each delivery loads, claims and settles one row, but one statement per row costs the
consumer and PostgreSQL a round trip, a plan and a commit each. A :class:`Coalescer`
collects the items submitted while its previous batch is still running and hands them to
``run_batch`` together, so batches stay small when the load is light (an idle coalescer
runs a lone item on the next event-loop turn) and grow by themselves when it is heavy.

``run_batch(items)`` returns one result per item, in order. If it raises, every submitter
of that batch gets the exception (callers retry one by one; their retries coalesce again).
A submitter cancelled while waiting does not cancel its batch; its result is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class Coalescer(Generic[_In, _Out]):
    def __init__(
        self,
        run_batch: Callable[[Sequence[_In]], Awaitable[Sequence[_Out]]],
        *,
        max_batch: int = 500,
        max_running: int = 1,
    ) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._max_running = max_running
        self._waiting: list[tuple[_In, asyncio.Future[_Out]]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, item: _In) -> _Out:
        result: asyncio.Future[_Out] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, result))
        if len(self._running) < self._max_running and len(self._waiting) == 1:
            # Started on the next turn, so the other submits of this turn join the batch.
            asyncio.get_running_loop().call_soon(self._start)
        return await result

    def _start(self) -> None:
        while self._waiting and len(self._running) < self._max_running:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._start()

    async def _run(self, batch: list[tuple[_In, asyncio.Future[_Out]]]) -> None:
        try:
            results = await self._run_batch([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for a batch of {len(batch)}")
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # handed to every submitter
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
