"""The outbox's own gauges, read from PostgreSQL at scrape time.

Rows by status and priority, the age of the oldest open row, outcome events not yet
published, and campaigns' recipients by state, in one cheap query over the partial indexes
``email_sends_open_idx`` and ``email_send_events_unpublished_idx``. Only the relay registers
it (``start_metrics_server(port, OutboxCollector(url))``), so N consumer processes do not
run the same query N times per scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg

from mailbus.campaigns.views import OVERVIEW as CAMPAIGN_STATES
from mailbus.campaigns.views import collect_overview
from mailbus.kernel import schema_guard
from mailbus.kernel.metrics import (
    OPEN_STATUSES,
    OUTBOX_SCRAPE_ERRORS,
    PRIORITIES,
    Collector,
    GaugeMetricFamily,
)

__all__ = ["OutboxCollector"]

log = logging.getLogger("mailbus.kernel.metrics")


_OUTBOX_QUERY = """
SELECT status, priority, count(*), extract(epoch FROM now() - min(created_at))
FROM email_sends
WHERE status IN ('pending', 'sending', 'unknown')
GROUP BY status, priority
UNION ALL
SELECT 'events', NULL, count(*), NULL FROM email_send_events WHERE published_at IS NULL
"""
# The last `mailbus retention run` (retention_runs, migration 0062): what it left past a
# window, and when a run last caught up. Zeros before the first run.
_RETENTION_QUERY = """
SELECT coalesce(last.backlog_rows, 0), coalesce(last.overdue_s, 0),
       coalesce(extract(epoch FROM last.finished_at), 0),
       coalesce((SELECT extract(epoch FROM max(finished_at)) FROM retention_runs
                 WHERE complete), 0)
FROM (SELECT 1) one
LEFT JOIN (SELECT * FROM retention_runs ORDER BY id DESC LIMIT 1) last ON true
"""


class OutboxCollector(Collector):
    """Outbox depth and oldest open age, and campaigns' recipients by state
    (:func:`mailbus.campaigns.views.collect_overview`), read from PostgreSQL at scrape time.

    The outbox query per scrape is answered from ``email_sends_open_idx``, under a short
    ``statement_timeout``. On any database error the scrape yields no outbox samples
    and ``mailbus_outbox_scrape_errors_total`` counts it; the next scrape reconnects.
    """

    def __init__(self, database_url: str, timeout_s: float = 2.0) -> None:
        self.database_url = database_url
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [*self._families(), _deprecated_age(), *_retention_families(None)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            rows, campaigns, retention = self._query()
        except psycopg.Error as exc:
            OUTBOX_SCRAPE_ERRORS.inc()
            log.warning("outbox metrics unavailable: %s", exc)
            return
        counts = {(s, p): 0 for s in OPEN_STATUSES for p in PRIORITIES}
        oldest = dict.fromkeys(PRIORITIES, 0.0)
        unpublished = 0
        for status, priority, count, age in rows:
            if priority is None:  # the outcome events' row
                unpublished = int(count)
                continue
            counts[(status, priority)] = int(count)
            oldest[priority] = max(oldest.get(priority, 0.0), float(age or 0.0))
        rows_family, age_family, campaign_family, events_family = self._families()
        deprecated_age = _deprecated_age()
        for (status, priority), count in sorted(counts.items()):
            rows_family.add_metric([status, priority], count)
        for priority, age in sorted(oldest.items()):
            age_family.add_metric([priority], age)
            deprecated_age.add_metric([priority], age)
        for campaign in campaigns:
            for state in CAMPAIGN_STATES:
                campaign_family.add_metric([str(campaign["id"]), state], campaign[state])
        events_family.add_metric([], unpublished)
        yield rows_family
        yield age_family
        yield deprecated_age
        yield campaign_family
        yield events_family
        yield from _retention_families(retention)

    def close(self) -> None:
        with self._lock:
            self._close_connection()

    def _families(
        self,
    ) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "mailbus_outbox_rows",
                "Open outbox rows (pending, sending, unknown) by status and priority.",
                labels=["status", "priority"],
            ),
            GaugeMetricFamily(
                "mailbus_oldest_open_age_seconds",
                "Age of the oldest open (pending, sending or unknown) row by priority; "
                "0 when none is open.",
                labels=["priority"],
            ),
            GaugeMetricFamily(
                "mailbus_campaign_recipients",
                "Recipients of each campaign not ended or ended within a day, by state"
                " (waiting, sent, failed, suppressed, unsubscribed).",
                labels=["campaign", "state"],
            ),
            GaugeMetricFamily(
                "mailbus_send_events_unpublished",
                "Outcome events recorded and not yet acknowledged on {prefix}.send.events.",
            ),
        )

    def _query(self) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]], tuple[Any, ...]]:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    timeout_ms = int(self.timeout_s * 1000)
                    self._conn = psycopg.connect(
                        self.database_url,
                        autocommit=True,
                        connect_timeout=max(1, int(self.timeout_s)),
                        application_name="mailbus-metrics",
                    )  # options= would replace the URL's (its search_path)
                    self._conn.execute(f"SET statement_timeout = {timeout_ms}")
                    schema_guard.check(self._conn)
                rows = self._conn.execute(_OUTBOX_QUERY).fetchall()
                retention: Any = self._conn.execute(_RETENTION_QUERY).fetchone()
                return rows, collect_overview(self._conn), tuple(retention)
            except psycopg.Error:
                self._close_connection()
                raise

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _deprecated_age() -> GaugeMetricFamily:
    """mailbus_oldest_open_age_seconds under its old name, for one more minor version
    (docs/reference/stability.md#deprecations)."""
    return GaugeMetricFamily(
        "mailbus_oldest_pending_age_seconds",
        "Deprecated: use mailbus_oldest_open_age_seconds (the same gauge).",
        labels=["priority"],
    )


_RETENTION_GAUGES = (
    (
        "mailbus_retention_backlog_rows",
        "Rows still past a retention window when the last `mailbus retention run` ended"
        " (counted up to 10 M a table); 0 when it caught up or never ran.",
    ),
    (
        "mailbus_retention_overdue_seconds",
        "How long the oldest row the last retention run left had been past its window.",
    ),
    (
        "mailbus_retention_last_run_timestamp_seconds",
        "When the last retention run ended (Unix time); 0 before the first.",
    ),
    (
        "mailbus_retention_last_caught_up_timestamp_seconds",
        "When a retention run last ended with nothing past a window (Unix time); 0: never.",
    ),
)


def _retention_families(values: tuple[Any, ...] | None) -> list[GaugeMetricFamily]:
    """The last retention run's gauges (docs/retention.md#is-it-keeping-up)."""
    families = []
    for i, (name, text) in enumerate(_RETENTION_GAUGES):
        family = GaugeMetricFamily(name, text)
        if values is not None:
            family.add_metric([], float(values[i]))
        families.append(family)
    return families
