"""Helpers of the command line's integration tests: rows seeded by SQL."""

from __future__ import annotations

import psycopg


def seed_dead_letters(database_url: str, count: int) -> None:
    """``count`` failed sends ``order-{n}-shipped`` (p1), each with its dead letter."""
    with psycopg.connect(database_url) as conn:
        for n in range(count):
            (send_id,) = conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status,"
                " attempts) VALUES (%s, 'ann@example.com', 'order_shipped', 'p1', 'failed', 3)"
                " RETURNING id",
                (f"order-{n}-shipped",),
            ).fetchone()  # type: ignore[misc]
            conn.execute(
                "INSERT INTO email_dead_letters (send_id, dedupe_key, priority, template,"
                " reason, error, attempts) VALUES (%s, %s, 'p1', 'order_shipped',"
                " 'max_attempts', '', 3)",
                (send_id, f"order-{n}-shipped"),
            )
