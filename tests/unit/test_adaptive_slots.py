"""The resizable semaphore bounding in-flight deliveries."""

from __future__ import annotations

import asyncio

from mailbus.consumer.gate import AdaptiveSlots


def test_never_more_holders_than_the_limit_and_fifo() -> None:
    async def scenario() -> tuple[int, list[int]]:
        slots = AdaptiveSlots(3)
        holding = most = 0
        order: list[int] = []

        async def worker(n: int) -> None:
            nonlocal holding, most
            async with slots:
                order.append(n)
                holding += 1
                most = max(most, holding)
                await asyncio.sleep(0.001)
                holding -= 1

        await asyncio.gather(*(worker(n) for n in range(50)))
        return most, order

    most, order = asyncio.run(scenario())
    assert most == 3
    assert order == list(range(50))


def test_growing_the_limit_admits_waiters_and_shrinking_holds_new_ones() -> None:
    async def scenario() -> tuple[int, int, int]:
        slots = AdaptiveSlots(1)
        release = asyncio.Event()

        async def hold() -> None:
            async with slots:
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(5)]
        await asyncio.sleep(0.01)
        before = slots.in_use
        slots.limit = 4
        await asyncio.sleep(0.01)
        grown = slots.in_use
        slots.limit = 2
        release.set()
        await asyncio.gather(*tasks)
        return before, grown, slots.in_use

    assert asyncio.run(scenario()) == (1, 4, 0)


def test_a_cancelled_waiter_gives_its_place_back() -> None:
    async def scenario() -> int:
        slots = AdaptiveSlots(1)
        async with slots:
            waiter = asyncio.create_task(slots.__aenter__())
            await asyncio.sleep(0.01)
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        return slots.in_use

    assert asyncio.run(scenario()) == 0


def test_acquire_gives_up_after_its_timeout_and_leaves_the_line_intact() -> None:
    async def scenario() -> tuple[bool, bool, int, int]:
        slots = AdaptiveSlots(1)
        await slots.acquire()
        timed_out = await slots.acquire(timeout=0.01)  # the holder keeps its slot
        later = asyncio.ensure_future(slots.acquire(timeout=5))
        await asyncio.sleep(0)
        slots.release()  # handed to the waiter still in line
        return timed_out, await later, slots.in_use, len(slots._waiters)

    timed_out, later, in_use, waiting = asyncio.run(scenario())
    assert (timed_out, later, in_use, waiting) == (False, True, 1, 0)
