"""The ledger's coalesced statements against real PostgreSQL: concurrent single-row calls
share statements, and every guard still holds per row."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import psycopg
from ledger_support import ORIGIN, claim, rows, seed, with_ledger

from mailbus.consumer.core import Decision, Status
from mailbus.consumer.ledger import LoadedSend, SendLedger


def test_concurrent_loads_claims_and_settles_each_land_on_their_own_row(
    database_url: str,
) -> None:
    ids = seed(database_url, 200)

    async def scenario(ledger: SendLedger) -> tuple[list[LoadedSend | None], list[bool]]:
        loaded = await asyncio.gather(*(ledger.load(i) for i in [*ids, 10**9]))
        tokens = await asyncio.gather(*(claim(ledger, i, 0, None) for i in ids))
        settled = await asyncio.gather(
            *(
                ledger.settle_call(
                    replace(send.view, status=Status.SENDING, attempts=1),
                    token,
                    Decision(Status.ACCEPTED, message_id=f"msg-{send.view.id}"),
                    ORIGIN,
                    latency_ms=50,
                )
                for send, token in zip(loaded, tokens, strict=False)
                if send is not None and token is not None
            )
        )
        return loaded, settled

    loaded, settled = with_ledger(database_url, scenario)
    assert loaded[-1] is None  # a missing row
    assert [send.view.id for send in loaded[:-1] if send is not None] == ids
    assert settled == [True] * 200
    assert rows(database_url) == {i: ("accepted", 1, f"msg-{i}") for i in ids}
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM email_attempts").fetchone() == (200,)


def test_the_same_row_claimed_twice_at_once_is_claimed_once(database_url: str) -> None:
    [row_id] = seed(database_url, 1)

    async def scenario(ledger: SendLedger) -> list[uuid.UUID | None]:
        # A duplicated pointer twice, and a stale pointer (attempt 3) before the right one.
        claims = [(row_id, 3), (row_id, 0), (row_id, 0), (row_id, 0)]
        return await asyncio.gather(*(claim(ledger, i, a, None) for i, a in claims))

    tokens = with_ledger(database_url, scenario)
    assert tokens[0] is None
    assert sum(token is not None for token in tokens) == 1
    assert rows(database_url)[row_id] == ("sending", 1, None)


def test_a_settle_whose_guard_fails_does_not_stop_the_others_of_its_batch(
    database_url: str,
) -> None:
    first, second = seed(database_url, 2)

    async def scenario(ledger: SendLedger) -> tuple[list[bool], bool]:
        loaded = await asyncio.gather(ledger.load(first), ledger.load(second))
        token = await claim(ledger, first, 0, None)
        assert token is not None and loaded[0] is not None and loaded[1] is not None
        sending = replace(loaded[0].view, status=Status.SENDING, attempts=1)
        rejected = Decision(Status.FAILED, reason="http 422", dead_letter=True, status_code=422)
        results = await asyncio.gather(
            ledger.settle_call(sending, uuid.uuid4(), rejected, ORIGIN, 50),  # not the lease
            ledger.settle_gate(loaded[1].view, Decision(Status.EXPIRED, reason="late"), ORIGIN),
            ledger.settle_call(sending, token, rejected, ORIGIN, 50),  # the lease holder
        )
        release_after_settle = await claim(ledger, first, 1, None)
        return list(results), release_after_settle is None

    results, unclaimable = with_ledger(database_url, scenario)
    assert results == [False, True, True]
    assert unclaimable  # failed is terminal
    assert rows(database_url) == {first: ("failed", 1, None), second: ("expired", 0, None)}
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT send_id, reason, status_code, original_offset FROM email_dead_letters"
        ).fetchall() == [(first, "rejected", 422, 42)]


def test_a_handed_back_claim_is_pending_again_at_the_same_attempt(database_url: str) -> None:
    [row_id] = seed(database_url, 1)

    async def scenario(ledger: SendLedger) -> uuid.UUID | None:
        token = await claim(ledger, row_id, 0, None)
        assert token is not None
        await ledger.release_claim(row_id, uuid.uuid4())  # not ours: nothing happens
        assert rows(database_url)[row_id] == ("sending", 1, None)
        await ledger.release_claim(row_id, token)
        return await claim(ledger, row_id, 0, None)  # the pointer's attempt again

    assert with_ledger(database_url, scenario) is not None
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT attempts, published_at IS NULL FROM email_sends"
        ).fetchone() == (1, True)
