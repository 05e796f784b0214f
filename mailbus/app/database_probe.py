"""The database round trip every long-running process's ``/readyz`` makes (issue 35,
review 2026-12-06 hole 16): a process whose database is black-holed (a failover that moved
its address, a partition) is not ready, within ``timeout_s``, instead of green until a
kernel's retransmission timeout ends a stuck call a quarter of an hour later."""

from __future__ import annotations

import psycopg

from mailbus.kernel import schema_guard
from mailbus.kernel.health import Probe

__all__ = ["database_probe"]


def database_probe(database_url: str, timeout_s: float = 3.0) -> Probe:
    """A :func:`mailbus.kernel.health.probe` that connects and runs ``SELECT 1``, the
    connection and the statement each bounded by ``timeout_s``; the new connection passes
    the schema guard too (mailbus/kernel/schema_guard.py)."""

    def check() -> tuple[bool, str]:
        try:
            with psycopg.connect(
                database_url,
                connect_timeout=max(2, round(timeout_s)),  # libpq's least is 2 s
                application_name="mailbus readyz",
            ) as conn:  # options= would replace the URL's (its search_path)
                conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
                conn.execute("SELECT 1")
                schema_guard.check(conn)  # an idle process learns of a restore too
        except psycopg.Error as exc:
            lines = str(exc).strip().splitlines()
            return False, f"no round trip: {lines[0] if lines else type(exc).__name__}"
        return True, ""

    return check
