"""Prometheus metrics: the only module that imports ``prometheus_client``.

Processes record what they do through the small ``observe_*``/``set_*`` API below; the
metric objects live in the default registry and are served by
:func:`start_metrics_server` on ``MAILBUS_METRICS_PORT``.

A process may add one collector of its own that reads at scrape time: the relay adds
:class:`~mailbus.relay.outbox_metrics.OutboxCollector` (the outbox's depth and ages).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from mailbus.kernel import health
from mailbus.kernel.tracecontext import TraceContext
from mailbus.kernel.version import installed_version

__all__ = [
    "BREAKER_STATES",
    "DEPRECATED",
    "OPEN_STATUSES",
    "OUTBOX_SCRAPE_ERRORS",
    "PRIORITIES",
    "Collector",  # with GaugeMetricFamily: what a scrape-time collector is built of
    "GaugeMetricFamily",
    "MetricDoc",
    "described",
    "observe_accepted",
    "observe_call",
    "observe_dead_letter",
    "observe_intake",
    "observe_lookup",
    "observe_malformed_trace",
    "observe_published",
    "observe_relay_delay",
    "observe_reputation",
    "observe_server_failure",
    "observe_webhook_event",
    "observe_webhook_ignored",
    "observe_webhook_late",
    "observe_webhook_rejected",
    "observe_webhook_settled",
    "record_librdkafka_stats",
    "set_breaker_state",
    "set_in_flight",
    "start_metrics_server",
    "stop_metrics_server",
]

log = logging.getLogger("mailbus.kernel.metrics")

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
PROVIDER_RATE_LIMITED = Counter(
    "mailbus_provider_rate_limited",
    "Send calls the email API answered with 429 Too Many Requests.",
)
# Deprecated names (docs/reference/stability.md#deprecations): exported beside their
# replacement for one more minor version, then removed.
DEPRECATED = {
    "mailbus_provider_429_total": "mailbus_provider_rate_limited_total",
    "mailbus_oldest_pending_age_seconds": "mailbus_oldest_open_age_seconds",
}
PROVIDER_429 = Counter(
    "mailbus_provider_429",
    "Deprecated: use mailbus_provider_rate_limited_total (the same count).",
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
SERVER_FAILURES = Counter(
    "mailbus_provider_server_failures",
    "Calls the provider's server failed before the mail reached it (SMTP: connect, auth,"
    " mail; a 530 anywhere) or answered about our account (HTTP: account, sender, quota),"
    " by provider (its kind, or fallback:<kind>) and stage: counted against the breaker,"
    " never against the mail.",
    ["provider", "stage"],
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
TRACE_CONTEXT_MALFORMED = Counter(
    "mailbus_trace_context_malformed",
    "Malformed W3C traceparent values ignored (the mail goes on without a trace), by where"
    " they were read: relay (email_sends.traceparent), consumer (Kafka header), intake"
    " (an event's header).",
    ["where"],
)
INTAKE_EVENTS = Counter(
    "mailbus_intake_events",
    "Domain events the intake committed, by outcome (inserted, duplicate, dead_letter,"
    " too_old: older than MAILBUS_INTAKE_MAX_AGE, recorded expired, not mailed).",
    ["outcome"],
)
INTAKE_LAG = Gauge(
    "mailbus_intake_lag",
    "Events of the intake topic's partition after the last one the intake committed"
    " (the partition's high watermark minus the next offset to read), by partition.",
    ["partition"],
)
PROVIDER_LATENCY = Histogram(
    "mailbus_provider_latency_seconds",
    "Duration of provider send calls, from request to classified answer.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0),
)
ENQUEUE_TO_ACCEPTED = Histogram(
    "mailbus_enqueue_to_accepted_seconds",
    "Time from a mail's enqueue (email_sends.created_at) to the provider's acceptance being"
    " recorded, on the database's clock, by priority; exemplars carry the mail's trace_id.",
    ["priority"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0),
)
RELAY_PUBLISH_DELAY = Histogram(
    "mailbus_relay_publish_delay_seconds",
    "Time from a send becoming due (its insert, or its next_try_at) to its pointer being"
    " acknowledged by Kafka and the relay's batch committed; exemplars carry the mail's"
    " trace_id.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
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
    "Delivery events received, by type (delivered, deferred, bounced, complained, dropped ="
    " accepted by the provider and then not sent) and result (stored, duplicate, unmatched ="
    " stored but no send has its message_id).",
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
REPUTATION_RATE = Gauge(
    "mailbus_reputation_rate",
    "Hard bounces or complaints per mail accepted in the reputation guard's window, by"
    " provider and kind (bounce, complaint).",
    ["provider", "kind"],
)
REPUTATION_SENT = Gauge(
    "mailbus_reputation_sent",
    "Mails accepted in the reputation guard's window, by provider: the rates' sample.",
    ["provider"],
)
REPUTATION_PAUSES = Counter(
    "mailbus_reputation_pauses",
    "Campaigns the reputation guard paused for their bounce or complaint rate.",
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
    "Webhook requests refused, by reason (missing, malformed, mismatch, stale, replayed: 401;"
    " invalid, too_deep: 400; too_large: 413).",
    ["reason"],
)
WEBHOOK_IGNORED = Counter(
    "mailbus_webhook_ignored",
    "Provider events verified but not applied, by provider and reason (stale: signed too"
    " long ago, a replay; untracked: an event kind mailbus does not follow, e.g. opens;"
    " invalid: an item of a batch that could not be read, the rest kept).",
    ["provider", "reason"],
)

WEBHOOK_SETTLED = Counter(
    "mailbus_webhook_settled",
    "Sends in unknown (a provider without a key or a look-up) settled as accepted by that"
    " provider's own event carrying their dedupe key, by provider.",
    ["provider"],
)
BUILD_INFO = Gauge(
    "mailbus_build_info",
    "Always 1: the running build, by mailbus's installed version and the Python it runs on.",
    ["version", "python"],
)

BUILD_INFO.labels(installed_version(), platform.python_version()).set(1)
for _type in ("delivered", "deferred", "bounced", "complained", "dropped"):
    for _result in ("stored", "duplicate", "unmatched"):
        WEBHOOK_EVENTS.labels(_type, _result)
for _kind in ("hard", "soft"):
    WEBHOOK_BOUNCES.labels(_kind)
for _reason in (
    "missing",
    "malformed",
    "mismatch",
    "stale",
    "invalid",
    "replayed",
    "too_deep",
    "too_large",
):
    WEBHOOK_REJECTED.labels(_reason)
for _priority in PRIORITIES:
    for _outcome in OUTCOMES:
        SENDS.labels(_priority, _outcome)
    RELAY_PUBLISHED.labels(_priority)
    ENQUEUE_TO_ACCEPTED.labels(_priority)
    ATTEMPT_WARNINGS.labels(_priority)
    DOMAIN_DEFERRALS.labels(_priority)
for _kind in ("send", "lookup"):
    PROVIDER_REQUESTS.labels(_kind)


class _Children:
    """A labelled metric's children, each looked up with ``.labels()`` once: that call
    validates and stringifies the values and takes the metric's lock every time, and the
    consumer records several per mail. For labels of a small fixed set of values only."""

    def __init__(self, metric: MetricWrapperBase) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


_sends = _Children(SENDS)
_sent_under_guarantee = _Children(SENT_UNDER_GUARANTEE)
_enqueue_to_accepted = _Children(ENQUEUE_TO_ACCEPTED)
_provider_requests = _Children(PROVIDER_REQUESTS)


def observe_call(priority: str, outcome: str, latency_s: float, status_code: int | None) -> None:
    """One provider send call: counts it by outcome, times it, counts a 429."""
    _sends(priority, outcome).inc()
    _provider_requests("send").inc()
    PROVIDER_LATENCY.observe(max(latency_s, 0.0))
    if status_code == 429:
        PROVIDER_RATE_LIMITED.inc()
        PROVIDER_429.inc()


@dataclass(frozen=True)
class MetricDoc:
    """A metric as the reference table shows it (docs/reference/metrics.md)."""

    name: str  # as scraped: a counter with its _total
    type: str
    labels: tuple[str, ...]
    help: str


def described(families: Iterable[GaugeMetricFamily] = ()) -> list[MetricDoc]:
    """This module's metrics and ``families`` (a collector's ``describe()``), by name."""
    found = []
    for value in globals().values():
        if isinstance(value, MetricWrapperBase):
            # prometheus_client keeps these on the object; its public API has no getter
            kind, name = str(value._type), value._name
            shown = f"{name}_total" if kind == "counter" else name
            found.append(MetricDoc(shown, kind, tuple(value._labelnames), value._documentation))
    for family in families:
        labels = tuple(getattr(family, "_labelnames", ()))
        found.append(MetricDoc(family.name, str(family.type), labels, family.documentation))
    return sorted(found, key=lambda doc: doc.name)


def _exemplar(trace: TraceContext | None) -> dict[str, str] | None:
    """The mail's trace as an OpenMetrics exemplar (served when the scraper asks for
    OpenMetrics); none for a mail without a sampled trace."""
    if trace is None or not trace.sampled:
        return None
    return {"trace_id": trace.trace_id, "span_id": trace.parent_id}


def observe_accepted(priority: str, since_enqueue_s: float, trace: TraceContext | None) -> None:
    """A mail's acceptance recorded ``since_enqueue_s`` after its enqueue."""
    _enqueue_to_accepted(priority).observe(max(since_enqueue_s, 0.0), _exemplar(trace))


def observe_relay_delay(seconds: float, trace: TraceContext | None) -> None:
    """A send pointer published and committed ``seconds`` after its row became due."""
    RELAY_PUBLISH_DELAY.observe(max(seconds, 0.0), _exemplar(trace))


def observe_guarantee(guarantee: str) -> None:
    """A row's first call was made, under ``guarantee`` (email_sends.guarantee)."""
    _sent_under_guarantee(guarantee).inc()


def observe_attempt_warning(priority: str) -> None:
    """A mail reached the attempt MAILBUS_ATTEMPT_WARNING names (counted once per mail)."""
    ATTEMPT_WARNINGS.labels(priority).inc()


def observe_domain_deferral(priority: str) -> None:
    DOMAIN_DEFERRALS.labels(priority).inc()


def observe_server_failure(provider: str, stage: str) -> None:
    SERVER_FAILURES.labels(provider, stage).inc()


def observe_lookup() -> None:
    """One look-up of an idempotency key at the provider."""
    PROVIDER_REQUESTS.labels("lookup").inc()


def observe_dead_letter(reason: str) -> None:
    DEAD_LETTERS.labels(reason).inc()


def observe_malformed_trace(where: str) -> None:
    """A malformed ``traceparent`` read at ``where`` and ignored."""
    TRACE_CONTEXT_MALFORMED.labels(where).inc()


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


def observe_webhook_ignored(provider: str, reason: str, n: int = 1) -> None:
    WEBHOOK_IGNORED.labels(provider, reason).inc(n)


def observe_webhook_settled(provider: str, n: int) -> None:
    WEBHOOK_SETTLED.labels(provider).inc(n)


def observe_webhook_rejected(reason: str) -> None:
    WEBHOOK_REJECTED.labels(reason).inc()


def observe_intake_lag(partition: int, lag: int) -> None:
    """After a batch: how far the intake is behind on ``partition``."""
    INTAKE_LAG.labels(str(partition)).set(max(0, lag))


def observe_intake(inserted: int, duplicates: int, dead_letters: int, too_old: int = 0) -> None:
    """One intake batch committed: rows created, events whose key existed, dead letters,
    rows recorded expired for their age."""
    for outcome, n in (
        ("inserted", inserted),
        ("duplicate", duplicates),
        ("dead_letter", dead_letters),
        ("too_old", too_old),
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


_server_lock = threading.Lock()
_servers: list[Any] = []
_extra: Collector | None = None  # the relay's OutboxCollector


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


def start_metrics_server(port: int, collector: Collector | None = None) -> None:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` in a daemon thread.

    Binds ``127.0.0.1`` unless ``MAILBUS_METRICS_ADDR`` names another address (e.g.
    ``0.0.0.0`` in a container). ``collector`` (one per process, replacing an earlier
    one) is registered too and closed by :func:`stop_metrics_server`.
    """
    global _extra
    addr = os.environ.get("MAILBUS_METRICS_ADDR", "").strip() or "127.0.0.1"
    with _server_lock:
        server = ThreadingHTTPServer((addr, port), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        _servers.append(server)
        if collector is not None:
            _unregister_extra()
            _extra = collector
            REGISTRY.register(collector)
    log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", addr, port)


def stop_metrics_server() -> None:
    """Stop every server :func:`start_metrics_server` started; unregister the collector."""
    with _server_lock:
        while _servers:
            server = _servers.pop()
            server.shutdown()
            server.server_close()
        _unregister_extra()


def _unregister_extra() -> None:
    global _extra
    if _extra is not None:
        REGISTRY.unregister(_extra)
        close = getattr(_extra, "close", None)
        if close is not None:
            close()
        _extra = None


def observe_reputation(rates: list[tuple[str, int, float, float]], paused: int) -> None:
    """A reputation guard round: (provider, mails accepted, bounce rate, complaint rate) of
    each provider with mail in the window, and the campaigns it paused."""
    for provider, sent, bounce_rate, complaint_rate in rates:
        REPUTATION_SENT.labels(provider).set(sent)
        REPUTATION_RATE.labels(provider, "bounce").set(bounce_rate)
        REPUTATION_RATE.labels(provider, "complaint").set(complaint_rate)
    if paused:
        REPUTATION_PAUSES.inc(paused)
