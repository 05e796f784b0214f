"""`mailbus status`: what is waiting, how old the oldest is, and what failed."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from mailbus.errors import StorageError
from mailbus.settings import Settings

__all__ = ["collect_status", "print_status"]

_BY_STATUS = """
SELECT priority, status, count(*) FROM email_sends GROUP BY priority, status
"""
_OLDEST_PENDING = """
SELECT priority, extract(epoch FROM now() - min(created_at))
FROM email_sends WHERE status IN ('pending', 'sending', 'unknown') GROUP BY priority
"""
_UNPUBLISHED = """
SELECT count(*) FROM email_sends WHERE status = 'pending' AND published_at IS NULL
"""


def collect_status(database_url: str) -> dict[str, Any]:
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            counts: dict[str, dict[str, int]] = {}
            for priority, status, count in conn.execute(_BY_STATUS):
                counts.setdefault(priority, {})[status] = count
            oldest = {p: round(float(age), 1) for p, age in conn.execute(_OLDEST_PENDING)}
            unpublished_row = conn.execute(_UNPUBLISHED).fetchone()
    except psycopg.Error as exc:
        raise StorageError(f"cannot read status: {exc}") from exc
    return {
        "by_priority": counts,
        "oldest_open_age_s": oldest,
        "not_yet_on_kafka": unpublished_row[0] if unpublished_row else 0,
        "failed": sum(c.get("failed", 0) for c in counts.values()),
    }


def print_status(settings: Settings, as_json: bool) -> int:
    status = collect_status(settings.database_url)
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    states = ["pending", "sending", "unknown", "accepted", "failed", "expired", "suppressed"]
    print(f"{'priority':<9}" + "".join(f"{s:>11}" for s in states) + f"{'oldest open':>13}")
    for priority in ("p0", "p1", "p2"):
        row = status["by_priority"].get(priority, {})
        age = status["oldest_open_age_s"].get(priority)
        age_text = "-" if age is None else f"{age:.0f}s"
        print(
            f"{priority:<9}" + "".join(f"{row.get(s, 0):>11}" for s in states) + f"{age_text:>13}"
        )
    print(f"not yet on Kafka: {status['not_yet_on_kafka']}   failed: {status['failed']}")
    return 0
