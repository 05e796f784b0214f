"""The relay is woken by NOTIFY only when rows were really added to the outbox tables."""

from __future__ import annotations

import psycopg

_DUPLICATE_SEND = (
    "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES"
    " ('wake-1', 'a@example.com', 'welcome') ON CONFLICT (dedupe_key) DO NOTHING"
)
# The shape of the consumer's settle: a dead-letter INSERT that usually inserts nothing.
_NO_DEAD_LETTER = (
    "WITH dead_letter AS (INSERT INTO email_dead_letters (reason) SELECT 'rejected' WHERE %s)"
    " SELECT 1"
)


def _notified(
    database_url: str,
    statement: str,
    params: tuple[object, ...] = (),
    channel: str = "mailbus_outbox",
) -> bool:
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {channel}")
        with psycopg.connect(database_url, autocommit=True) as writer:
            writer.execute(statement, params or None)  # type: ignore[arg-type]
        return any(True for _ in listener.notifies(timeout=1.0, stop_after=1))


def test_inserted_rows_wake_the_relay_and_empty_inserts_do_not(database_url: str) -> None:
    assert _notified(database_url, _DUPLICATE_SEND)  # the first insert adds the row
    assert not _notified(database_url, _DUPLICATE_SEND)  # a duplicate adds nothing
    assert not _notified(database_url, _NO_DEAD_LETTER, (False,))
    assert _notified(database_url, _NO_DEAD_LETTER, (True,))


def test_a_reported_change_wakes_the_event_lane_only(database_url: str) -> None:
    """A change that records an outcome event wakes the relay's event lane on its own
    channel; internal churn wakes nothing, and no outcome wakes the pointer lane."""
    assert _notified(database_url, _DUPLICATE_SEND)
    update = "UPDATE email_sends SET status = %s WHERE dedupe_key = 'wake-1'"
    events = "mailbus_send_events"
    assert not _notified(database_url, update, ("sending",), events)
    assert not _notified(database_url, update, ("accepted",))  # the pointer lane's channel
    assert _notified(database_url, update, ("failed",), events)
    assert not _notified(database_url, "UPDATE email_sends SET published_at = now()", (), events)


def test_p0_sends_notify_their_own_channel(database_url: str) -> None:
    """Issue 37: new P0 sends wake the relay's P0 lane alone, other sends the pointer lane
    alone; an insert of both wakes both."""
    insert = (
        "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
        " SELECT %s || p, 'a@example.com', 'welcome', p FROM unnest(%s::text[]) p"
    )
    p0, others = "mailbus_outbox_p0", "mailbus_outbox"
    assert _notified(database_url, insert, ("a-", ["p0"]), p0)
    assert not _notified(database_url, insert, ("b-", ["p0"]), others)
    assert not _notified(database_url, insert, ("c-", ["p1", "p2"]), p0)
    assert _notified(database_url, insert, ("d-", ["p1", "p2"]), others)
    assert _notified(database_url, insert, ("e-", ["p0", "p2"]), p0)
    assert _notified(database_url, insert, ("f-", ["p0", "p2"]), others)
    assert not _notified(database_url, _NO_DEAD_LETTER, (True,), p0)  # dead letters: theirs


def test_a_notification_names_its_transaction(database_url: str) -> None:
    """0075: the payload names the sending transaction (its id and start), which a relay's
    workers answer once (relay/standby.py); a transaction's inserts still notify once."""
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN mailbus_outbox")
        with psycopg.connect(database_url) as writer:
            txid = writer.execute("SELECT pg_current_xact_id()::text").fetchone()
            for key in ("named-1", "named-2"):
                writer.execute(
                    "INSERT INTO email_sends (dedupe_key, to_address, template)"
                    " VALUES (%s, 'a@example.com', 'welcome')",
                    (key,),
                )
        payloads = [n.payload for n in listener.notifies(timeout=1.0)]
    assert txid is not None
    assert len(payloads) == 1
    assert payloads[0].startswith(f"{txid[0]}@")


def test_an_insert_that_adds_nothing_is_given_no_transaction_id(database_url: str) -> None:
    """0075 names a notification only when rows were added: a duplicate enqueue (ON
    CONFLICT DO NOTHING) writes nothing, so its transaction gets no id and no commit record."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_DUPLICATE_SEND)  # the row exists
        with conn.transaction():
            conn.execute(_DUPLICATE_SEND)
            assigned = conn.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()
    assert assigned == (None,)


def test_a_dead_letter_s_notification_says_it_is_one(database_url: str) -> None:
    """0077: a dead letter's payload is its transaction's name after ``dead-letter:``, a new
    send's the name alone, so a relay woken by new sends alone may skip the dead letters'
    claim (relay/dead_letter_claims.py)."""
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN mailbus_outbox")
        with psycopg.connect(database_url, autocommit=True) as writer:
            writer.execute(_NO_DEAD_LETTER, (True,))
            writer.execute(_DUPLICATE_SEND)  # the first insert adds the row
        payloads = [n.payload for n in listener.notifies(timeout=1.0, stop_after=2)]
    assert len(payloads) == 2, payloads
    dead_letter, send = payloads
    assert dead_letter.startswith("dead-letter:") and "@" in dead_letter
    assert not send.startswith("dead-letter:") and "@" in send
