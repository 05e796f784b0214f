"""Prometheus metrics: the only module that imports ``prometheus_client``.

Processes record what they do through the small ``observe_*``/``set_*`` API below; the
metric objects live in the default registry and are served by
:func:`start_metrics_server` on ``MAILBUS_METRICS_PORT``.

The outbox itself (rows by status and priority, age of the oldest open row, outcome events
not yet published) is read at scrape time by :class:`OutboxCollector` with one cheap query
over the partial indexes ``email_sends_open_idx`` and ``email_send_events_unpublished_idx``.
Only the relay registers it, so N consumer processes do not run the same query N times per
scrape.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import psycopg
from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector

from campaigns.views import OVERVIEW as CAMPAIGN_STATES
from campaigns.views import collect_overview
from mailbus import health

__all__ = [
    "BREAKER_STATES",
    "OutboxCollector",
    "observe_call",
    "observe_dead_letter",
    "observe_intake",
    "observe_lookup",
    "observe_published",
    "observe_webhook_event",
    "observe_webhook_late",
    "observe_webhook_rejected",
    "record_librdkafka_stats",
    "set_breaker_state",
    "set_in_flight",
    "start_metrics_server",
    "stop_metrics_server",
]

log = logging.getLogger("mailbus.metrics")

PRIORITIES = ("p0", "p1", "p2")
OPEN_STATUSES = ("pending", "sending", "unknown")
OUTCOMES = ("accepted", "pending", "failed", "unknown", "expired", "suppressed")
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

# No `*_created` series: they double the output and no rule here reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

SENDS = Counter(
    "mailbus_sends",
    "Provider send calls by priority and the status the call led to "
    "(accepted, pending = retry later, failed, unknown, expired, suppressed).",
    ["priority", "outcome"],
)
PROVIDER_REQUESTS = Counter(
    "mailbus_provider_requests",
    "HTTP requests made to the email API, by kind (send, lookup).",
    ["kind"],
)
PROVIDER_429 = Counter(
    "mailbus_provider_429",
    "Send calls the email API answered with 429 Too Many Requests.",
)
SENT_UNDER_GUARANTEE = Counter(
    "mailbus_sent_under_guarantee",
    "Mails whose first provider call was made, by the guarantee they were sent under "
    "(exactly_once, at_most_once, at_least_once; email_sends.guarantee).",
    ["guarantee"],
)
ATTEMPT_WARNINGS = Counter(
    "mailbus_attempt_warnings",
    "Mails whose call was their MAILBUS_ATTEMPT_WARNING-th attempt (default 3), by priority.",
    ["priority"],
)
DOMAIN_DEFERRALS = Counter(
    "mailbus_domain_deferrals",
    "Mails held back, without a call, because their recipient domain is throttling us "
    "(SMTP 421/452, or a 429 scoped to the domain), by priority.",
    ["priority"],
)
DEAD_LETTERS = Counter(
    "mailbus_dead_letters",
    "Dead letters recorded, by reason (rejected, max_attempts, undecodable, ...).",
    ["reason"],
)
RELAY_PUBLISHED = Counter(
    "mailbus_relay_published",
    "Records the relay published and Kafka acknowledged, by priority"
    " (p0..p2; dlq and events for dead letters and outcome events).",
    ["priority"],
)
INTAKE_EVENTS = Counter(
    "mailbus_intake_events",
    "Domain events the intake committed, by outcome (inserted, duplicate, dead_letter).",
    ["outcome"],
)
PROVIDER_LATENCY = Histogram(
    "mailbus_provider_latency_seconds",
    "Duration of provider send calls, from request to classified answer.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0),
)
BREAKER_STATE = Gauge(
    "mailbus_breaker_state",
    "Circuit breaker of this process per provider: 0 closed, 1 half-open, 2 open.",
    ["provider"],
)
IN_FLIGHT_LIMIT = Gauge(
    "mailbus_in_flight_limit",
    "Current adaptive limit of concurrent provider calls, by priority.",
    ["priority"],
)
IN_FLIGHT = Gauge(
    "mailbus_in_flight",
    "Provider calls in flight now, by priority.",
    ["priority"],
)
CONSUMER_LAG = Gauge(
    "mailbus_consumer_lag",
    "Messages between the committed offset and the high watermark of each assigned "
    "partition (librdkafka consumer_lag).",
    ["topic", "partition"],
)
OUTBOX_SCRAPE_ERRORS = Counter(
    "mailbus_outbox_scrape_errors",
    "Scrapes whose outbox query failed or timed out (their outbox samples are missing).",
)

WEBHOOK_EVENTS = Counter(
    "mailbus_webhook_events",
    "Delivery events received, by type (delivered, deferred, bounced, complained) and "
    "result (stored, duplicate, unmatched = stored but no send has its message_id).",
    ["type", "result"],
)
WEBHOOK_BOUNCES = Counter(
    "mailbus_webhook_bounces",
    "Bounces received (each event id once), by kind (hard, soft).",
    ["kind"],
)
WEBHOOK_COMPLAINTS = Counter(
    "mailbus_webhook_complaints",
    "Complaints received (each event id once).",
)
WEBHOOK_SUPPRESSIONS = Counter(
    "mailbus_webhook_suppressions",
    "Addresses added to email_suppressions by hard bounces and complaints.",
)
WEBHOOK_LATE = Counter(
    "mailbus_webhook_late_matched",
    "Unmatched delivery events applied later, once their send had recorded its message_id.",
)
WEBHOOK_REJECTED = Counter(
    "mailbus_webhook_rejected",
    "Webhook requests refused, by reason (missing, malformed, mismatch, stale: 401; invalid: 400).",
    ["reason"],
)

for _type in ("delivered", "deferred", "bounced", "complained"):
    for _result in ("stored", "duplicate", "unmatched"):
        WEBHOOK_EVENTS.labels(_type, _result)
for _kind in ("hard", "soft"):
    WEBHOOK_BOUNCES.labels(_kind)
for _reason in ("missing", "malformed", "mismatch", "stale", "invalid"):
    WEBHOOK_REJECTED.labels(_reason)
for _priority in PRIORITIES:
    for _outcome in OUTCOMES:
        SENDS.labels(_priority, _outcome)
    RELAY_PUBLISHED.labels(_priority)
    ATTEMPT_WARNINGS.labels(_priority)
    DOMAIN_DEFERRALS.labels(_priority)
for _kind in ("send", "lookup"):
    PROVIDER_REQUESTS.labels(_kind)


def observe_call(priority: str, outcome: str, latency_s: float, status_code: int | None) -> None:
    """One provider send call: counts it by outcome, times it, counts a 429."""
    SENDS.labels(priority, outcome).inc()
    PROVIDER_REQUESTS.labels("send").inc()
    PROVIDER_LATENCY.observe(max(latency_s, 0.0))
    if status_code == 429:
        PROVIDER_429.inc()


def observe_guarantee(guarantee: str) -> None:
    """A row's first call was made, under ``guarantee`` (email_sends.guarantee)."""
    SENT_UNDER_GUARANTEE.labels(guarantee).inc()


def observe_attempt_warning(priority: str) -> None:
    """A mail reached the attempt MAILBUS_ATTEMPT_WARNING names (counted once per mail)."""
    ATTEMPT_WARNINGS.labels(priority).inc()


def observe_domain_deferral(priority: str) -> None:
    DOMAIN_DEFERRALS.labels(priority).inc()


def observe_lookup() -> None:
    """One look-up of an idempotency key at the provider."""
    PROVIDER_REQUESTS.labels("lookup").inc()


def observe_dead_letter(reason: str) -> None:
    DEAD_LETTERS.labels(reason).inc()


def observe_published(priority: str, n: int) -> None:
    """``n`` send pointers of ``priority`` acknowledged by Kafka."""
    if n > 0:
        RELAY_PUBLISHED.labels(priority).inc(n)


def observe_webhook_event(
    event_type: str, bounce: str | None, result: str, suppressed: int
) -> None:
    """One delivery event handled; bounces and complaints count only when new."""
    WEBHOOK_EVENTS.labels(event_type, result).inc()
    if result == "duplicate":
        return
    if event_type == "bounced" and bounce is not None:
        WEBHOOK_BOUNCES.labels(bounce).inc()
    elif event_type == "complained":
        WEBHOOK_COMPLAINTS.inc()
    if suppressed > 0:
        WEBHOOK_SUPPRESSIONS.inc(suppressed)


def observe_webhook_late(applied: int, suppressed: int) -> None:
    """One sweep of events that came before their send's message_id."""
    if applied > 0:
        WEBHOOK_LATE.inc(applied)
    if suppressed > 0:
        WEBHOOK_SUPPRESSIONS.inc(suppressed)


def observe_webhook_rejected(reason: str) -> None:
    WEBHOOK_REJECTED.labels(reason).inc()


def observe_intake(inserted: int, duplicates: int, dead_letters: int) -> None:
    """One intake batch committed: rows created, events whose key existed, dead letters."""
    for outcome, n in (
        ("inserted", inserted),
        ("duplicate", duplicates),
        ("dead_letter", dead_letters),
    ):
        if n > 0:
            INTAKE_EVENTS.labels(outcome).inc(n)


def set_breaker_state(provider: str, state: str) -> None:
    """``state`` is ``closed``, ``half_open`` or ``open``."""
    try:
        value = BREAKER_STATES[state]
    except KeyError:
        raise ValueError(f"unknown breaker state {state!r}") from None
    BREAKER_STATE.labels(provider).set(value)


def set_in_flight(priority: str, current: int, limit: int) -> None:
    IN_FLIGHT.labels(priority).set(current)
    IN_FLIGHT_LIMIT.labels(priority).set(limit)


def record_librdkafka_stats(stats_json: str) -> None:
    """A confluent-kafka ``stats_cb``: sets ``mailbus_consumer_lag`` from the statistics.

    Partition -1 (the internal unassigned partition) is skipped; a lag of -1 (unknown,
    e.g. a partition not assigned here or without a committed offset) removes the
    partition's sample, so a revoked partition does not report a stale lag.
    Never raises: a bad document is logged and ignored.
    """
    try:
        stats = json.loads(stats_json)
        topics: dict[str, Any] = stats.get("topics") or {}
        for topic, topic_stats in topics.items():
            for key, partition in (topic_stats.get("partitions") or {}).items():
                number = int(partition.get("partition", key))
                if number < 0:
                    continue
                lag = int(partition.get("consumer_lag", -1))
                if lag < 0:
                    _remove_lag(topic, str(number))
                else:
                    CONSUMER_LAG.labels(topic, str(number)).set(lag)
    except (ValueError, TypeError, AttributeError) as exc:
        log.warning("ignoring unreadable librdkafka statistics: %s", exc)


def _remove_lag(topic: str, partition: str) -> None:
    with contextlib.suppress(KeyError):
        CONSUMER_LAG.remove(topic, partition)


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
    (:func:`campaigns.views.collect_overview`), read from PostgreSQL at scrape time.

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


_server_lock = threading.Lock()
_servers: list[Any] = []
_outbox: OutboxCollector | None = None


class _Handler(MetricsHandler):
    """``/metrics`` as prometheus_client serves it, plus ``/healthz`` and ``/readyz``."""

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/healthz":
            self._reply(200, {"status": "live"})
        elif path == "/readyz":
            ready, components = health.readiness()
            self._reply(200 if ready else 503, {"ready": ready, "components": components})
        else:
            super().do_GET()

    def _reply(self, status: int, document: dict[str, Any]) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds are not worth a log line each."""


def start_metrics_server(port: int, database_url: str | None = None) -> None:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` in a daemon thread.

    Binds ``127.0.0.1`` unless ``MAILBUS_METRICS_ADDR`` names another address (e.g.
    ``0.0.0.0`` in a container). With ``database_url``, also registers the
    :class:`OutboxCollector` (call this with it from the relay only).
    """
    global _outbox
    addr = os.environ.get("MAILBUS_METRICS_ADDR", "").strip() or "127.0.0.1"
    with _server_lock:
        server = ThreadingHTTPServer((addr, port), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        _servers.append(server)
        if database_url is not None:
            if _outbox is not None:
                REGISTRY.unregister(_outbox)
                _outbox.close()
            _outbox = OutboxCollector(database_url)
            REGISTRY.register(_outbox)
    log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", addr, port)


def stop_metrics_server() -> None:
    """Stop every server :func:`start_metrics_server` started; unregister the collector."""
    global _outbox
    with _server_lock:
        while _servers:
            server = _servers.pop()
            server.shutdown()
            server.server_close()
        if _outbox is not None:
            REGISTRY.unregister(_outbox)
            _outbox.close()
            _outbox = None
