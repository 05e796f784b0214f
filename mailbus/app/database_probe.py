"""The database round trip every long-running process's ``/readyz`` makes (issue 35,
review 2026-12-06 hole 16): a process whose database is black-holed (a failover that moved
its address, a partition) is not ready, within ``timeout_s``, instead of green until a
kernel's retransmission timeout ends a stuck call a quarter of an hour later."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import psycopg

from mailbus.kernel import schema_guard
from mailbus.kernel.health import Probe

__all__ = ["database_probe"]

_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"  # until the transaction ends


def database_probe(database_url: str, timeout_s: float = 3.0) -> Probe:
    """A :func:`mailbus.kernel.health.probe` that connects and runs ``SELECT 1``, the
    connection and the statements each bounded by ``timeout_s``; the new connection passes
    the schema guard too (mailbus/kernel/schema_guard.py). The statement timeout is set in
    the probe's transaction, not as a startup option, which a PgBouncer drops
    (docs/guides/pgbouncer.md); a statement a PgBouncer holds until a server connection is
    free counts in no statement timeout, so the whole check is bounded too (:func:`within`)."""
    connect_s = max(2, round(timeout_s))  # libpq's least is 2 s

    def check() -> tuple[bool, str]:
        try:
            with psycopg.connect(
                database_url,
                connect_timeout=connect_s,
                application_name="mailbus readyz",
            ) as conn:
                conn.execute(_TIMEOUT, (f"{int(timeout_s * 1000)}ms",))
                conn.execute("SELECT 1")
                schema_guard.check(conn)  # an idle process learns of a restore too
        except psycopg.Error as exc:
            lines = str(exc).strip().splitlines()
            return False, f"no round trip: {lines[0] if lines else type(exc).__name__}"
        return True, ""

    return within(check, connect_s + timeout_s)


def within(check: Probe, wait_s: float) -> Probe:
    """``check`` run in a thread of its own and awaited ``wait_s``: not ready when it has
    not answered by then. While it still waits, the next probes await its answer rather
    than start another (one connection at most, however long a pooler holds it)."""
    lock = threading.Lock()
    pending: list[Future[tuple[bool, str]]] = []

    def run(answer: Future[tuple[bool, str]]) -> None:
        try:
            answer.set_result(check())
        except Exception as exc:  # the caller's to report (mailbus/kernel/health.py)
            answer.set_exception(exc)

    def bounded() -> tuple[bool, str]:
        with lock:
            if not pending or pending[0].done():
                pending[:] = [Future()]
                thread = threading.Thread(
                    target=run, args=(pending[0],), name="readyz-database", daemon=True
                )
                thread.start()
            answer = pending[0]
        try:
            return answer.result(timeout=wait_s)
        except TimeoutError:
            return False, f"no answer within {wait_s:g} s"

    return bounded
