"""Group commit: concurrent submits share batches, results and failures reach their callers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from mailbus.kernel.coalescer import Coalescer


class Recorder:
    def __init__(self, fail_on: int | None = None, delay: float = 0.01) -> None:
        self.batches: list[list[int]] = []
        self.running = 0
        self.most_running = 0
        self._fail_on = fail_on
        self._delay = delay

    async def __call__(self, items: Sequence[int]) -> list[int]:
        self.batches.append(list(items))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(self._delay)
        self.running -= 1
        if self._fail_on in items:
            raise ValueError("batch failed")
        return [item * 10 for item in items]


def test_a_lone_submit_runs_alone_and_gets_its_result() -> None:
    recorder = Recorder()

    async def scenario() -> int:
        return await Coalescer(recorder).submit(7)

    assert asyncio.run(scenario()) == 70
    assert recorder.batches == [[7]]


def test_submits_arriving_while_batches_run_share_the_next_batch() -> None:
    recorder = Recorder()

    async def scenario() -> list[int]:
        coalescer = Coalescer(recorder, max_batch=1000, max_running=1)

        async def later(item: int) -> int:
            await asyncio.sleep(0.001 * (item % 5))
            return await coalescer.submit(item)

        return await asyncio.gather(*(later(n) for n in range(200)))

    results = asyncio.run(scenario())
    assert results == [n * 10 for n in range(200)]
    assert sorted(n for batch in recorder.batches for n in batch) == list(range(200))
    assert len(recorder.batches) < 20  # ~5 arrival waves, ~10 ms per batch
    assert recorder.most_running == 1


def test_batches_are_capped_and_run_at_most_max_running_at_once() -> None:
    recorder = Recorder()

    async def scenario() -> None:
        coalescer = Coalescer(recorder, max_batch=10, max_running=3)
        await asyncio.gather(*(coalescer.submit(n) for n in range(100)))

    asyncio.run(scenario())
    assert max(len(batch) for batch in recorder.batches) == 10
    assert len(recorder.batches) == 10
    assert recorder.most_running == 3


def test_a_failed_batch_fails_each_of_its_submitters_and_not_the_next_batch() -> None:
    recorder = Recorder(fail_on=3)

    async def scenario() -> tuple[list[int | BaseException], int]:
        coalescer = Coalescer(recorder, max_running=1)
        first = await asyncio.gather(
            *(coalescer.submit(n) for n in range(5)), return_exceptions=True
        )
        return first, await coalescer.submit(8)

    first, after = asyncio.run(scenario())
    assert all(isinstance(result, ValueError) for result in first)
    assert after == 80


def test_a_cancelled_submitter_leaves_its_batch_running_for_the_others() -> None:
    recorder = Recorder(delay=0.05)

    async def scenario() -> int:
        coalescer = Coalescer(recorder)
        doomed = asyncio.ensure_future(coalescer.submit(1))
        kept = asyncio.ensure_future(coalescer.submit(2))
        await asyncio.sleep(0.01)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await kept

    assert asyncio.run(scenario()) == 20
    assert recorder.batches == [[1, 2]]


def test_a_result_count_mismatch_is_an_error_not_a_silent_misassignment() -> None:
    async def short(items: Sequence[int]) -> list[int]:
        return list(items)[:-1]

    async def scenario() -> None:
        coalescer = Coalescer(short)
        await asyncio.gather(coalescer.submit(1), coalescer.submit(2))

    with pytest.raises(RuntimeError, match="1 results for a batch of 2"):
        asyncio.run(scenario())
