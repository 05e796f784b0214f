"""HeldTokens: the shared bucket is asked only when no token is held, by one send at a
time; a take of nothing waits and asks again; no limit lets a send through."""

from __future__ import annotations

import asyncio

from mailbus.consumer.held_tokens import HeldTokens


class Bucket:
    def __init__(self, answers: list[tuple[int, float] | None]) -> None:
        self.answers = answers
        self.asked = 0

    async def take(self) -> tuple[int, float] | None:
        self.asked += 1
        await asyncio.sleep(0)  # another send may run meanwhile
        return self.answers.pop(0)


def spend_all(held: HeldTokens, bucket: Bucket, sends: int) -> None:
    async def main() -> None:
        await asyncio.gather(*(held.spend(bucket.take) for _ in range(sends)))

    asyncio.run(main())


def test_one_take_serves_as_many_sends_as_it_granted() -> None:
    held, bucket = HeldTokens(), Bucket([(5, 0.0), (5, 0.0)])
    spend_all(held, bucket, 7)  # concurrent sends: one of them asks at a time
    assert bucket.asked == 2 and bucket.answers == []


def test_a_take_of_nothing_waits_and_asks_again() -> None:
    held, bucket = HeldTokens(), Bucket([(0, 0.01), (0, 0.01), (1, 0.0)])
    spend_all(held, bucket, 1)
    assert bucket.asked == 3


def test_no_limit_lets_every_send_through_without_a_token() -> None:
    held, bucket = HeldTokens(), Bucket([None, None])
    spend_all(held, bucket, 2)
    assert bucket.asked == 2


def test_dropped_tokens_are_not_spent() -> None:
    held, bucket = HeldTokens(), Bucket([(3, 0.0), (3, 0.0)])
    spend_all(held, bucket, 1)  # two tokens left
    held.drop()
    spend_all(held, bucket, 1)
    assert bucket.asked == 2
