"""The console's overview (docs/guides/console.md#the-overview-at-any-size): the top of
`mailbus status`, cheap at any size of ``email_sends``.

Open rows (pending, sending, unknown) are few and all sit in the partial index
``email_sends_open_idx``: they are counted exactly, with the oldest one's age per priority
(`mailbus status`'s own query). Settled rows (accepted, failed, expired, suppressed) are
nearly the whole table: once it is larger than :data:`EXACT_BELOW`, each priority and
status is the planner's row estimate (``pg_class.reltuples`` scaled to the table's current
size, times the pair's frequency in the statistics of migration 0037), and the result says
so (``estimated``). Nothing here reads the settled rows of a large table.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from mailbus.app.status import _DEAD_LETTERS, _OLDEST_PENDING, _UNPUBLISHED, PRIORITIES, _breakers
from mailbus.console import figures
from mailbus.kernel.errors import StorageError

__all__ = ["EXACT_BELOW", "SETTLED", "collect_overview", "overview_on"]

SETTLED = ("accepted", "failed", "expired", "suppressed")
# Below this many bytes of heap (about 100,000 rows) counting every row is cheap and exact.
EXACT_BELOW = 32 * 1024**2

_SIZE = "SELECT pg_relation_size('email_sends')"
# email_sends_open_idx (migration 0001): its predicate is this WHERE, so only open rows are read.
_OPEN_BY_STATUS = """
SELECT priority, status, count(*) FROM email_sends
WHERE status IN ('pending', 'sending', 'unknown') GROUP BY priority, status
"""
_SETTLED_BY_STATUS = """
SELECT priority, status, count(*) FROM email_sends
WHERE status NOT IN ('pending', 'sending', 'unknown') GROUP BY priority, status
"""
_BRANCH = "SELECT FROM email_sends WHERE priority = {} AND status = {}"


def collect_overview(database_url: str, exact_below: int = EXACT_BELOW) -> dict[str, Any]:
    """Rows by priority and status (settled ones estimated on a large table), the oldest
    open row's age per priority, rows not yet on Kafka, failed rows, dead letters not
    replayed, the breakers (the keys of :func:`mailbus.app.status.collect_status` that the
    overview page shows, plus ``estimated``) and the recent rates
    (:func:`mailbus.console.figures.rates`): one connection for the whole page."""
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            return overview_on(conn, exact_below)
    except psycopg.Error as exc:
        raise StorageError(f"cannot read the overview: {exc}") from exc


def overview_on(conn: psycopg.Connection[Any], exact_below: int = EXACT_BELOW) -> dict[str, Any]:
    """:func:`collect_overview` on a connection given (the console's pool)."""
    try:
        counts: dict[str, dict[str, int]] = {p: {} for p in PRIORITIES}
        for priority, status, n in conn.execute(_OPEN_BY_STATUS):
            counts.setdefault(priority, {})[status] = n
        size = conn.execute(_SIZE).fetchone()
        estimated = size is not None and size[0] >= exact_below
        settled = _estimates(conn) if estimated else conn.execute(_SETTLED_BY_STATUS)
        for priority, status, n in settled:
            counts.setdefault(priority, {})[status] = n
        oldest = {p: round(float(age), 1) for p, age in conn.execute(_OLDEST_PENDING)}
        unpublished = conn.execute(_UNPUBLISHED).fetchone()
        dead_letters = sum(n for _reason, n in conn.execute(_DEAD_LETTERS))
        breakers = _breakers(conn)
        rates = figures.rates(conn)
    except psycopg.Error as exc:
        raise StorageError(f"cannot read the overview: {exc}") from exc
    return {
        "by_priority": counts,
        "estimated": estimated,
        "oldest_open_age_s": oldest,
        "not_yet_on_kafka": unpublished[0] if unpublished else 0,
        "failed": sum(c.get("failed", 0) for c in counts.values()),
        "dead_letters": {"not_replayed": dead_letters},
        "breakers": breakers,
        "rates": rates,
    }


def _estimates(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
    """The planner's row estimate of each settled (priority, status), all in one EXPLAIN
    (one branch of the Append each, in order): no row is read."""
    cells = [(p, s) for p in PRIORITIES for s in SETTLED]
    query = sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(" UNION ALL ").join(
        sql.SQL(_BRANCH).format(sql.Literal(p), sql.Literal(s)) for p, s in cells
    )
    row = conn.execute(query).fetchone()
    branches = row[0][0]["Plan"]["Plans"] if row else []
    return [(p, s, int(b["Plan Rows"])) for (p, s), b in zip(cells, branches, strict=True)]
