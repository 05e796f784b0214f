"""The first attempt's one statement (claim_first_attempt: load and claim at once) and the
settle that undoes it, against real PostgreSQL: what it claims, what it leaves to the usual
path, and that a mail found unfit once read is left as if never claimed."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from ledger_support import ORIGIN, claim, seed, with_ledger

from mailbus.consumer.core import Decision, Status
from mailbus.consumer.core.decide import unsendable
from mailbus.consumer.ledger import FirstClaim, SendLedger

CONTRACT_FIELDS = (
    "SELECT status, attempts, first_tried_at, guarantee, provider, provider_kind, provider_key,"
    " lease_token, published_at FROM email_sends WHERE id = %s"
)


def _fields(database_url: str, row_id: int) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        found = conn.execute(CONTRACT_FIELDS, (row_id,)).fetchone()
    assert found is not None
    return tuple(found)


async def _first(
    ledger: SendLedger,
    row_id: int,
    token: uuid.UUID,
    dedupe_key: str | None = None,
    template: str = "welcome",
    priority: str = "p1",
) -> FirstClaim | None:
    key = dedupe_key if dedupe_key is not None else f"batch-{row_id}"
    return await ledger.claim_first_attempt(
        row_id,
        key,
        template,
        priority,
        "postmark",
        token,
        provider_kind="postmark",
        guarantee="exactly_once",
    )


def _keys(database_url: str, ids: list[int]) -> None:
    """seed() names its rows batch-1, batch-2 …; name them by id, as _first expects."""
    with psycopg.connect(database_url) as conn:
        for row_id in ids:
            conn.execute(
                "UPDATE email_sends SET dedupe_key = %s WHERE id = %s", (f"batch-{row_id}", row_id)
            )


def test_a_never_claimed_row_is_loaded_as_it_was_and_claimed_in_one_statement(
    database_url: str,
) -> None:
    [row_id] = seed(database_url, 1)
    _keys(database_url, [row_id])
    token = uuid.uuid4()

    async def scenario(ledger: SendLedger) -> tuple[FirstClaim | None, FirstClaim | None]:
        return await _first(ledger, row_id, token), await _first(ledger, row_id, uuid.uuid4())

    first, duplicate = with_ledger(database_url, scenario)
    assert first is not None and first.claim is not None and first.claim.token == token
    view = first.loaded.view
    assert (view.status, view.attempts, view.first_tried_at) == (Status.PENDING, 0, None)
    assert view.key == f"batch-{row_id}" and first.loaded.provider is None
    status, attempts, tried_at, guarantee, provider, kind, key, lease, _ = _fields(
        database_url, row_id
    )
    assert (status, attempts, guarantee, provider, kind, key, lease) == (
        "sending", 1, "exactly_once", "postmark", "postmark", f"batch-{row_id}", token
    )
    assert tried_at is not None
    # a duplicate pointer's claim: the row comes back as it is now, unclaimed
    assert duplicate is not None and duplicate.claim is None
    assert duplicate.loaded.view.status is Status.SENDING


def test_a_claim_retried_after_its_reply_was_lost_gets_the_row_as_it_was_before(
    database_url: str,
) -> None:
    [row_id] = seed(database_url, 1)
    _keys(database_url, [row_id])
    token = uuid.uuid4()

    async def scenario(ledger: SendLedger) -> tuple[FirstClaim | None, FirstClaim | None]:
        return await _first(ledger, row_id, token), await _first(ledger, row_id, token)

    first, again = with_ledger(database_url, scenario)
    assert first is not None and again is not None and again.claim is not None
    assert again.loaded.view == first.loaded.view  # pending, attempt 0, never tried
    assert again.guarantee_before is None
    assert _fields(database_url, row_id)[:2] == ("sending", 1)  # counted once


def test_rows_it_does_not_claim_come_back_for_the_usual_path(database_url: str) -> None:
    # Tried before, expiring, a later life of its key, of a paused campaign, given a
    # provider, in doubt; and two whose pointer names another template or priority than
    # the row's (another producer's header decides nothing).
    ids = seed(database_url, 8)
    _keys(database_url, ids)
    tried, expiring, later_life, paused, elsewhere, in_doubt, spoofed, promoted = ids
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET first_tried_at = now() WHERE id = %s", (tried,))
        conn.execute(
            "UPDATE email_sends SET in_doubt_since = now() WHERE id = %s", (in_doubt,)
        )
        conn.execute(
            "UPDATE email_sends SET expires_at = now() + interval '10 ms' WHERE id = %s",
            (expiring,),
        )
        conn.execute(
            "INSERT INTO email_key_lives (dedupe_key, lives) VALUES (%s, 1)",
            (f"batch-{later_life}",),
        )
        (campaign,) = conn.execute(
            "INSERT INTO campaigns (name, template, state, rate_per_min)"
            " VALUES ('c', 'welcome', 'paused', 100) RETURNING id"
        ).fetchone() or (None,)
        conn.execute("UPDATE email_sends SET campaign_id = %s WHERE id = %s", (campaign, paused))
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET provider = 'fallback' WHERE id = %s", (elsewhere,))

    async def scenario(ledger: SendLedger) -> list[FirstClaim | None]:
        return [
            await _first(
                ledger,
                row_id,
                uuid.uuid4(),
                template="other" if row_id == spoofed else "welcome",
                priority="p0" if row_id == promoted else "p1",
            )
            for row_id in ids
        ]

    for row_id, first in zip(ids, with_ledger(database_url, scenario), strict=True):
        assert first is not None and first.claim is None, row_id
        assert first.loaded.view.id == row_id
        assert _fields(database_url, row_id)[:2] == ("pending", 0), row_id
    with psycopg.connect(database_url) as conn:
        unleased = conn.execute(
            "SELECT count(*) FROM email_sends WHERE id = ANY(%s) AND lease_token IS NULL", (ids,)
        ).fetchone()
    assert unleased == (8,)


def test_a_suppressed_row_is_claimed_for_the_consumer_to_weigh(database_url: str) -> None:
    # A suppression that stops only bulk mail does not stop a receipt: the consumer decides,
    # and undoes the claim of a mail it stops (test_first_claim_delivery.py).
    ids = seed(database_url, 2)
    _keys(database_url, ids)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_suppressions (address, reason)"
            " SELECT to_address, 'hard_bounce' FROM email_sends WHERE id = %s",
            (ids[0],),
        )
        conn.execute(
            "INSERT INTO email_suppressions (address, reason)"
            " SELECT to_address, 'unsubscribed' FROM email_sends WHERE id = %s",
            (ids[1],),
        )
        scopes = conn.execute("SELECT scope FROM email_suppressions ORDER BY scope").fetchall()
    assert scopes == [("all",), ("bulk",)]

    async def scenario(ledger: SendLedger) -> list[FirstClaim | None]:
        return [await _first(ledger, row_id, uuid.uuid4()) for row_id in ids]

    found = with_ledger(database_url, scenario)
    assert [(f.claim is not None, f.loaded.suppression) for f in found if f] == [
        (True, "all"), (True, "bulk")
    ]


def test_a_pointer_of_another_dedupe_key_finds_no_row(database_url: str) -> None:
    [row_id] = seed(database_url, 1)
    _keys(database_url, [row_id])

    async def scenario(ledger: SendLedger) -> FirstClaim | None:
        return await _first(ledger, row_id, uuid.uuid4(), dedupe_key="someone-else")

    assert with_ledger(database_url, scenario) is None
    assert _fields(database_url, row_id)[:2] == ("pending", 0)


def test_a_mail_found_unfit_once_read_is_settled_as_if_never_claimed(database_url: str) -> None:
    # An operator made one row at_least_once before any claim: undone, it is kept.
    plain, chosen = seed(database_url, 2)
    _keys(database_url, [plain, chosen])
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET guarantee = 'at_least_once' WHERE id = %s", (chosen,))
    before = {row_id: _fields(database_url, row_id) for row_id in (plain, chosen)}

    async def scenario(ledger: SendLedger) -> list[bool]:
        settled = []
        for row_id in (plain, chosen):
            first = await _first(ledger, row_id, uuid.uuid4())
            assert first is not None and first.claim is not None
            invalid = unsendable("template", "no such template")
            settled.append(
                await ledger.settle_gate(first.loaded.view, invalid, ORIGIN, first.undo())
            )
        return settled

    assert with_ledger(database_url, scenario) == [True, True]
    for row_id in (plain, chosen):
        status, attempts, tried_at, guarantee, provider, kind, key, lease, _ = _fields(
            database_url, row_id
        )
        assert (status, attempts, tried_at, provider, kind, key, lease) == (
            "failed", 0, None, None, None, None, None
        )
        assert guarantee == before[row_id][3]
    with psycopg.connect(database_url) as conn:
        letters = conn.execute(
            "SELECT send_id, attempts, reason FROM email_dead_letters ORDER BY send_id"
        ).fetchall()
        history = conn.execute("SELECT count(*) FROM email_attempts").fetchone()
    assert letters == [(plain, 0, "invalid"), (chosen, 0, "invalid")]
    assert history == (0,)


def test_an_undone_deferral_leaves_the_row_pending_for_the_relay(database_url: str) -> None:
    [row_id] = seed(database_url, 1)
    _keys(database_url, [row_id])

    async def scenario(ledger: SendLedger) -> bool:
        first = await _first(ledger, row_id, uuid.uuid4())
        assert first is not None and first.claim is not None
        later = Decision(Status.PENDING, retry_at=ledger.clock.now(), reason="domain deferred")
        settled = await ledger.settle_gate(first.loaded.view, later, ORIGIN, first.undo())
        # a claim with the usual statement then finds a never-claimed row
        return settled and await claim(ledger, row_id, 0, None) is not None

    assert with_ledger(database_url, scenario)
    status, attempts, tried_at, _, provider, *_ = _fields(database_url, row_id)
    assert (status, attempts, provider) == ("sending", 1, None) and tried_at is not None
