"""The recovery cap in PostgreSQL: shared by processes, never above the ramp, P0 first."""

from __future__ import annotations

import asyncio

from mailbus.consumer.core.recovery import RecoveryPolicy, allowed_between
from mailbus.consumer.recovery_pacer import RecoveryPacer

RATE = 20.0  # sends/s at the start of the ramp; a long ramp keeps it nearly flat here
POLICY = RecoveryPolicy(rate_per_s=RATE, ramp_s=3600.0, after_s=0.0)


def test_no_ramp_means_no_cap(database_url: str) -> None:
    async def scenario() -> None:
        pacer = RecoveryPacer(database_url, "http://provider", POLICY)
        try:
            for _ in range(1000):  # never started: no token needed, no wait
                await asyncio.wait_for(pacer.acquire(p0=False), 5)
        finally:
            await pacer.close()

    asyncio.run(scenario())


def test_two_processes_together_stay_under_the_ramp(database_url: str) -> None:
    async def scenario() -> tuple[int, float]:
        pacers = [RecoveryPacer(database_url, "http://provider", POLICY) for _ in range(2)]
        try:
            await pacers[0].start()  # one process's breaker closed: both are capped
            granted = 0

            async def send(pacer: RecoveryPacer) -> None:
                nonlocal granted
                for _ in range(30):
                    await pacer.acquire(p0=False)
                    granted += 1

            await asyncio.gather(*(send(p) for p in pacers))
            rows = await pacers[0]._run("recovery_elapsed")
            return granted, float(str(rows[0][0]))
        finally:
            for pacer in pacers:
                await pacer.close()

    granted, elapsed = asyncio.run(scenario())
    assert granted == 60
    # what the ramp allows since its start, plus each process's batch: the bucket starts empty
    assert granted <= allowed_between(POLICY, 0.0, elapsed) + 2 * max(1, int(RATE // 20))


def test_sends_asked_for_while_the_ramp_starts_are_capped_by_it(database_url: str) -> None:
    """The breaker closed: the first send starts the ramp, and the others that ask while
    its statement runs wait for it. They had read "no ramp" a moment before (kept for a
    second) and went out uncapped: five sends before the ramp's start where four may go,
    in a CI run of tests/e2e/test_recovery.py."""

    async def scenario() -> tuple[int, float]:
        pacer = RecoveryPacer(database_url, "http://provider", POLICY)
        try:
            await pacer.acquire(p0=False)  # no ramp: read, and remembered for a second
            starting = asyncio.ensure_future(pacer.start())
            sends = [asyncio.ensure_future(pacer.acquire(p0=False)) for _ in range(30)]
            await starting
            done, waiting = await asyncio.wait(sends, timeout=0.5)
            for send in waiting:
                send.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            rows = await pacer._run("recovery_elapsed")
            return len(done), float(str(rows[0][0]))
        finally:
            await pacer.close()

    granted, elapsed = asyncio.run(scenario())
    assert granted <= allowed_between(POLICY, 0.0, elapsed) + max(1, int(RATE // 20))


def test_p0_sends_take_the_tokens_while_they_wait(database_url: str) -> None:
    async def scenario() -> list[str]:
        p0, p1 = (RecoveryPacer(database_url, "http://provider", POLICY) for _ in range(2))
        order: list[str] = []
        try:
            # both connected before the race: P0's connect on a loaded machine must not
            # read as P1 taking the tokens ahead of it
            await p0.start()
            await p1.start()

            async def send(pacer: RecoveryPacer, name: str, count: int) -> None:
                for _ in range(count):
                    await pacer.acquire(p0=name == "p0")
                    order.append(name)

            await asyncio.gather(send(p1, "p1", 15), send(p0, "p0", 10))
            return order
        finally:
            await p0.close()
            await p1.close()

    order = asyncio.run(scenario())
    # P1 may slip one token in before P0 first finds the bucket empty, then waits for P0
    assert order.index("p0") <= 1
    last_p0 = len(order) - 1 - order[::-1].index("p0")
    assert order[:last_p0].count("p1") <= 1, order


def test_another_provider_has_its_own_ramp(database_url: str) -> None:
    async def scenario() -> None:
        primary = RecoveryPacer(database_url, "http://primary", POLICY)
        other = RecoveryPacer(database_url, "http://transactional", POLICY)
        try:
            await primary.start()
            for _ in range(200):  # the other provider never recovered: uncapped
                await asyncio.wait_for(other.acquire(p0=True), 5)
        finally:
            await primary.close()
            await other.close()

    asyncio.run(scenario())
