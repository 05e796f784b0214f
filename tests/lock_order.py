"""Lock-order probes for the tests that show a statement takes many rows' locks in one
order (tests/integration/test_*_lock_order.py): while a transaction holds the first row in
that order, the statement must wait for it holding nothing that comes after it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from relay_runner import wait_until


def waits_for(database_url: str, holder_pid: int) -> bool:
    """Whether a session waits for a lock the session ``holder_pid`` holds (pg_locks, which
    every role reads whole; pg_stat_activity hides another login's wait)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE NOT granted"
            " AND %s = ANY(pg_blocking_pids(pid)))",
            (holder_pid,),
        ).fetchone()
    return bool(row and row[0])


def waits_holding_nothing_after(
    database_url: str, hold: str, statement: Callable[[], Any], probe: str
) -> Any:
    """Run ``statement`` in a thread while a transaction holds what ``hold`` locks (the
    first row in lock order), and once it waits (or ends: one that skips locked rows never
    waits), ``probe`` (the holder's next lock) with a short lock_timeout; what
    ``statement`` returned once ``hold`` is released."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = statement()
        except Exception as exc:  # a deadlock, should its lock order differ
            outcome["error"] = exc

    with psycopg.connect(database_url) as holder:
        holder.execute(hold)
        thread = threading.Thread(target=run)
        thread.start()
        wait_until(
            lambda: waits_for(database_url, holder.info.backend_pid) or not thread.is_alive(),
            10,
            "the statement waiting",
        )
        try:
            holder.execute("SET LOCAL lock_timeout = '200ms'")
            holder.execute(probe)
        except psycopg.errors.LockNotAvailable:
            pytest.fail(f"the statement held what {sql(probe)!r} locks while {sql(hold)!r} held")
        finally:
            holder.rollback()
    thread.join(30)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome["error"]
    return outcome["result"]


def sql(statement: str) -> str:
    """``statement`` without its comment lines, on one line."""
    return " ".join(line for line in statement.splitlines() if not line.startswith("--"))
