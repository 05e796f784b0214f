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
        return list(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            rows, campaigns = self._query()
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
        for (status, priority), count in sorted(counts.items()):
            rows_family.add_metric([status, priority], count)
        for priority, age in sorted(oldest.items()):
            age_family.add_metric([priority], age)
        for campaign in campaigns:
            for state in CAMPAIGN_STATES:
                campaign_family.add_metric([str(campaign["id"]), state], campaign[state])
        events_family.add_metric([], unpublished)
        yield rows_family
        yield age_family
        yield campaign_family
        yield events_family

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
                "mailbus_oldest_pending_age_seconds",
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

    def _query(self) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    timeout_ms = int(self.timeout_s * 1000)
                    self._conn = psycopg.connect(
                        self.database_url,
                        autocommit=True,
                        connect_timeout=max(1, int(self.timeout_s)),
                        options=f"-c statement_timeout={timeout_ms}",
                        application_name="mailbus-metrics",
                    )
                rows = self._conn.execute(_OUTBOX_QUERY).fetchall()
                return rows, collect_overview(self._conn)
            except psycopg.Error:
                self._close_connection()
                raise

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
