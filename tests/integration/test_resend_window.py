"""The claim records the guarantee and the first call's start, and holds a row in doubt to
its idempotency key's window, on the database's clock (issue 20), against real PostgreSQL."""

from __future__ import annotations

import uuid

import psycopg
from ledger_support import seed, with_ledger

from mailbus.app.status import collect_status, render_status
from mailbus.consumer.ledger import SendLedger


def test_a_row_in_doubt_is_claimed_again_only_inside_its_window(database_url: str) -> None:
    inside, past, never_tried = seed(database_url, 3)
    with psycopg.connect(database_url) as conn:
        conn.execute(  # two rows whose first call had no known outcome: 1 s and 5 s ago
            "UPDATE email_sends SET attempts = 1, in_doubt_since = now(),"
            " first_tried_at = now() - make_interval(secs => CASE id WHEN %s THEN 1 ELSE 5 END)"
            " WHERE id = ANY(%s)",
            (inside, [inside, past]),
        )

    async def scenario(ledger: SendLedger) -> list[bool]:
        won = []
        for row_id, attempt in ((inside, 1), (past, 1), (never_tried, 0)):
            claim = await ledger.claim_for_send(
                row_id, attempt, None, uuid.uuid4(), guarantee="exactly_once", resend_window_s=3
            )
            won.append(claim is not None)
        return won

    assert with_ledger(database_url, scenario) == [True, False, True]
    with psycopg.connect(database_url) as conn:
        recorded = dict(
            (row_id, (status, guarantee, first is not None))
            for row_id, status, guarantee, first in conn.execute(
                "SELECT id, status, guarantee, first_tried_at FROM email_sends"
            )
        )
    assert recorded == {
        inside: ("sending", "exactly_once", True),
        past: ("pending", None, True),  # never resent: past the window
        never_tried: ("sending", "exactly_once", True),  # its first call starts the window
    }
    status = collect_status(database_url)
    assert status["by_guarantee"] == {"exactly_once": 2}
    assert "sent under: exactly_once 2" in render_status(status)
