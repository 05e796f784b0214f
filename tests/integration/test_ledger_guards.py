"""The guards of the claim and the ledger's once-only writes, against real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from datetime import timedelta

import psycopg
from ledger_support import ORIGIN, claim, rows, seed, with_ledger

from mailbus.consumer.core import Decision, Status
from mailbus.consumer.core.decide import SEND_HEADROOM_S
from mailbus.consumer.ledger import Claim, SendLedger


def test_a_claim_retried_after_its_reply_was_lost_gets_the_row_again_uncounted(
    database_url: str,
) -> None:
    [row_id] = seed(database_url, 1)
    token = uuid.uuid4()

    async def scenario(ledger: SendLedger) -> list[uuid.UUID | None]:
        first = await claim(ledger, row_id, 0, None, token)
        again = await claim(ledger, row_id, 0, None, token)  # the same claim, retried
        other = await claim(ledger, row_id, 0, None)  # a duplicate pointer's claim
        return [first, again, other]

    assert with_ledger(database_url, scenario) == [token, token, None]
    assert rows(database_url)[row_id] == ("sending", 1, None)


def test_a_lease_starts_when_the_claim_lands_not_when_it_was_sent(database_url: str) -> None:
    # The relay holds the row's lock for 2 s; the claim waits on it with a 1 s lease.
    [row_id] = seed(database_url, 1)

    async def scenario(ledger: SendLedger) -> float:
        with psycopg.connect(database_url) as locker:
            locker.execute("SELECT 1 FROM email_sends WHERE id = %s FOR UPDATE", (row_id,))
            claiming = asyncio.create_task(claim(ledger, row_id, 0, None))
            await asyncio.sleep(2)
            locker.commit()
        assert await claiming is not None
        with psycopg.connect(database_url) as conn:
            (left,) = conn.execute(
                "SELECT extract(epoch FROM lease_until - clock_timestamp()) FROM email_sends"
            ).fetchone() or (None,)
        return float(left)

    left = with_ledger(database_url, scenario, lease_s=1)
    assert 0 < left <= 1, left  # with now() it was born lapsed: about -1 s


def test_a_row_tried_at_one_provider_is_never_claimed_for_another(database_url: str) -> None:
    [row_id] = seed(database_url, 1)

    async def scenario(ledger: SendLedger) -> list[uuid.UUID | None]:
        loaded = await ledger.load(row_id)
        token = await claim(ledger, row_id, 0, "fallback")
        assert loaded is not None and token is not None
        sending = replace(loaded.view, status=Status.SENDING, attempts=1)
        retry = Decision(Status.PENDING, retry_at=ledger.clock.now() - timedelta(seconds=1))
        assert await ledger.settle_call(sending, token, retry, ORIGIN, 2000)
        return [await claim(ledger, row_id, 1, None), await claim(ledger, row_id, 1, "fallback")]

    primary, fallback = with_ledger(database_url, scenario)
    assert primary is None and fallback is not None
    assert rows(database_url)[row_id] == ("sending", 2, None)


def test_an_expired_row_is_not_claimed_and_a_claim_knows_its_time_left(
    database_url: str,
) -> None:
    # A row expiring within SEND_HEADROOM_S is refused too: its call could arrive late.
    expired, expiring, fresh = seed(database_url, 3)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE email_sends SET expires_at = now() + CASE id WHEN %s"
            " THEN interval '-1 second' WHEN %s THEN interval '30 milliseconds'"
            " ELSE interval '60 seconds' END",
            (expired, expiring),
        )

    async def scenario(ledger: SendLedger) -> tuple[list[Claim | None], float]:
        before = time.monotonic()
        claims = [
            await ledger.claim_for_send(send_id, 0, None, uuid.uuid4())
            for send_id in (expired, expiring, fresh)
        ]
        return claims, before

    (lost, too_late, won), before = with_ledger(database_url, scenario)
    assert lost is None and too_late is None
    assert won is not None and won.send_by is not None
    assert before + 58 < won.send_by <= time.monotonic() + 60 - SEND_HEADROOM_S
    assert rows(database_url)[expired] == ("pending", 0, None)
    assert rows(database_url)[expiring] == ("pending", 0, None)


def test_an_undecodable_message_is_recorded_once(database_url: str) -> None:
    async def scenario(ledger: SendLedger) -> None:
        for _ in range(2):  # a retry after a lost reply
            await ledger.record_undecodable(replace(ORIGIN, value=b"\x00junk"), "bad magic")

    with_ledger(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM email_dead_letters").fetchone() == (1,)


def test_suppressions_match_addresses_in_any_case(database_url: str) -> None:
    [row_id] = seed(database_url, 1)  # to u1@example.com
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO email_suppressions (address) VALUES ('U1@Example.COM')")

    async def scenario(ledger: SendLedger) -> str | None:
        loaded = await ledger.load(row_id)
        assert loaded is not None
        return loaded.suppression

    assert with_ledger(database_url, scenario) == "all"  # a manual entry stops all mail


def test_the_ledger_reads_the_databases_clock(database_url: str) -> None:
    [row_id] = seed(database_url, 1)

    async def scenario(ledger: SendLedger) -> float:
        await ledger.load(row_id)
        await asyncio.sleep(0.5)  # advanced by the monotonic clock meanwhile
        with psycopg.connect(database_url) as conn:
            (database_now,) = conn.execute("SELECT clock_timestamp()").fetchone() or (None,)
        return abs((ledger.clock.now() - database_now).total_seconds())

    assert with_ledger(database_url, scenario) < 1.0
