"""The dedupe key's UNIQUE index compares bytes (migration 0017: a campaign fan-out spent a
tenth of its CPU in strcoll), and still serves every lookup and ON CONFLICT by the key."""

from __future__ import annotations

import psycopg

from mailbus_client.steps import client_queries


def test_dedupe_keys_are_compared_bytewise(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT collation_name FROM information_schema.columns"
            " WHERE table_name = 'email_sends' AND column_name = 'dedupe_key'"
        ).fetchone()
    assert row == ("C",)


def test_a_lookup_by_key_is_answered_by_the_unique_index(database_url: str) -> None:
    """The client's lookup passes the key as a parameter of the database's collation: the
    column's "C" must win, or the index could not serve it."""
    lookup = client_queries()["find_by_dedupe_key"]
    with psycopg.connect(database_url) as conn:
        conn.execute("SET enable_seqscan = off")  # a seq scan only if no index can serve
        plan = conn.execute(f"EXPLAIN {lookup}", {"dedupe_key": "order-1-confirmation"}).fetchall()
    assert "email_sends_dedupe_key_key" in "\n".join(line for (line,) in plan)


def test_keys_that_differ_only_where_collations_disagree_stay_distinct(database_url: str) -> None:
    """Byte order and a linguistic order disagree on case and punctuation; uniqueness is
    equality, which they share: such keys are two rows, a repeated one is none."""
    keys = ["campaign-1-user-a", "campaign-1-user-A", "campaign-1-user-a-", "campaign-1-user-a"]
    with psycopg.connect(database_url) as conn:
        added = [
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, 'a@example.com', 'newsletter')"
                " ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
                (key,),
            ).fetchone()
            is not None
            for key in keys
        ]
    assert added == [True, True, True, False]
