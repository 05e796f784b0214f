"""`mailbus consume`: wires the adapters, the Kafka sources and the reconciler together.

One process serves one or more priorities; each priority is its own consumer group
(``{prefix}.delivery.{priority}``), so P0 has its own members and never waits behind a
P1/P2 backlog. At most ``MAILBUS_MAX_IN_FLIGHT`` deliveries run at once per process.
SIGTERM/SIGINT: stop taking messages, finish what is in flight, commit, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Sequence

from mailbus.consumer.content import TemplatedProvider
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.backoff import with_schedule
from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.recovery import RecoveryPolicy
from mailbus.consumer.gate import ProviderGate
from mailbus.consumer.kafka_source import KafkaSource
from mailbus.consumer.ledger import MessageOrigin, SendLedger
from mailbus.consumer.provider import Dialect, HttpProvider
from mailbus.consumer.providers import Provider
from mailbus.consumer.providers.mailgun import MailgunDialect
from mailbus.consumer.providers.postmark import PostmarkDialect
from mailbus.consumer.providers.resend import RESEND_WINDOW_S, ResendDialect
from mailbus.consumer.providers.sendgrid import SendGridDialect
from mailbus.consumer.providers.smtp import SmtpProvider
from mailbus.consumer.rate_limit import GlobalRateLimiter
from mailbus.consumer.reconciler import Reconciler
from mailbus.consumer.recovery_pacer import RecoveryPacer
from mailbus.consumer.service import DeliveryService, Stopping
from mailbus.consumer.templates import TemplateStore
from mailbus.kernel import health, metrics
from mailbus.kernel.errors import ConfigError, StorageError
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.schemas.registry import pointer_codec
from mailbus_client.policies import configured_policy_book

__all__ = ["lease_seconds", "run_consumer", "slot_wait_seconds", "window_margin_seconds"]

log = logging.getLogger("mailbus.consumer")


def slot_wait_seconds(settings: Settings) -> float:
    """How long a claimed row waits for an in-flight slot before its claim is handed back."""
    return settings.request_timeout / 2


def window_margin_seconds(settings: Settings) -> float:
    """How long before an idempotency key's window ends a resend under it is no longer
    started (MAILBUS_KEY_WINDOW_MARGIN): at least the wait for an in-flight slot, the
    connect and the request timeouts together (a resend claimed just inside the window
    still reaches the provider inside it); the configured margin adds clock skew."""
    reach = slot_wait_seconds(settings) + settings.connect_timeout + settings.request_timeout
    return max(settings.key_window_margin, reach)


def lease_seconds(settings: Settings) -> float:
    """Long enough for a claimed row's wait for a slot, its call and the look-up that may
    follow it."""
    return (
        slot_wait_seconds(settings) + settings.connect_timeout + 2 * settings.request_timeout + 5.0
    )


def run_consumer(settings: Settings, priorities: Sequence[str]) -> int:
    return asyncio.run(_serve(settings, priorities))


def _tracer(exporter: str | None) -> Tracer:
    """No OpenTelemetry at all unless an exporter is configured (docs/guides/tracing.md)."""
    if exporter is None:
        return NOOP
    try:
        from mailbus.kernel import otel  # the extra mailbus[tracing]
    except ImportError:
        raise ConfigError(
            "MAILBUS_OTEL_EXPORTER", "needs OpenTelemetry: install mailbus with the extra [tracing]"
        ) from None
    return otel.exporting_tracer(exporter, "mailbus-consumer")


async def _serve(settings: Settings, priorities: Sequence[str]) -> int:
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ledger = SendLedger(
        settings.database_url,
        max_connections=min(settings.max_in_flight, 20),
        lease_s=lease_seconds(settings),
        max_age_s=settings.max_age,
        key_prefix=settings.provider_key_prefix,
    )
    own, provider, provider_url = _process_provider(settings, priorities)
    reporter = _HealthReporter(ledger, provider_url)
    recovery = None
    if settings.recovery_rate is not None:
        recovery = RecoveryPacer(
            settings.database_url,
            provider_url,
            RecoveryPolicy(settings.recovery_rate, settings.recovery_ramp, settings.recovery_after),
        )
    gate = ProviderGate(
        settings.max_in_flight,
        BreakerPolicy(),
        GlobalRateLimiter(settings.database_url, settings.rate_limit)
        if settings.rate_limit
        else None,
        on_breaker_change=reporter.breaker_changed,
        on_limit_change=lambda limit: log.info("in-flight limit now %d", limit),
        default_pause_s=settings.backoff_base,
        recovery=recovery,
    )
    slots = gate.slots
    policy = with_schedule(
        RetryPolicy(
            settings.max_attempts,
            settings.backoff_base,
            settings.backoff_cap,
            settings.late_accept_s,
            max_age_s=settings.max_age,
            quota_pause_s=settings.quota_pause,
        ),
        settings.retry_schedule,
    )
    fallback = None
    if settings.fallback_provider_url:
        fallback = _templated(
            settings,
            _http_provider(
                settings,
                settings.fallback_provider_url,
                settings.fallback_provider_api_key,
                settings.fallback_provider_api_key_file,
            ),
        )
    service = DeliveryService(
        ledger,
        provider,
        gate,
        policy,
        slot_wait_s=slot_wait_seconds(settings),
        policies=configured_policy_book(),
        fallback=fallback,
        stop_requested=stop.is_set,
        codec=pointer_codec(settings),
        attempt_warning=settings.attempt_warning,
        provider_name=own,
        at_least_once=settings.unknown_outcome == "at_least_once",
        reach_s=window_margin_seconds(settings),
        settle_s=settings.lookup_settle,
        # a priority's own provider (MAILBUS_PROVIDER_P0_URL, ...) speaks the HTTP API
        provider_kind=settings.provider if own is None else "http",
        tracer=_tracer(settings.otel_exporter),
    )
    await ledger.open()
    if settings.metrics_port is not None:
        metrics.start_metrics_server(settings.metrics_port)

    async def deliver(origin: MessageOrigin) -> None:
        try:
            await service.handle(origin)
        except Stopping:
            raise
        except Exception:
            # A bug, not an outage: log it and move on. The row keeps its state; the
            # reconciler hands long-published pending rows back to the relay.
            log.exception(
                "delivery failed unexpectedly at %s[%d]@%d",
                origin.topic,
                origin.partition,
                origin.offset,
            )

    drain_s = settings.connect_timeout + settings.request_timeout + 5.0
    sources = [
        KafkaSource(
            client_config=kafka_client_config(settings),
            group_id=f"{settings.topic_prefix}.delivery.{priority}",
            topic=settings.topic(priority),
            handler=deliver,
            loop=loop,
            max_outstanding=4 * settings.max_in_flight,  # calls, plus loads and settles
            drain_s=drain_s,
            stop=stop,
        )
        for priority in priorities
    ]
    reconciler = Reconciler(service, priorities, slots)
    reconciling = asyncio.create_task(reconciler.run())
    reporting = asyncio.create_task(reporter.run(service.stopping))
    health.mark("consumer", True)
    for source in sources:
        source.start()
    log.info("consuming %s", ", ".join(source.topic for source in sources))
    while any(source.is_alive() for source in sources):
        await asyncio.sleep(0.1)
        if stop.is_set():
            health.mark("consumer", False, "draining")
        for priority in priorities:  # the process's slots serve all its priorities
            metrics.set_in_flight(priority, slots.in_use, slots.limit)
        if any(source.failure for source in sources):
            stop.set()
    service.stopping.set()
    await reconciling
    await reporting
    await provider.aclose()
    if recovery is not None:
        await recovery.close()
    if fallback is not None:
        await fallback.aclose()
    await ledger.close()
    failed = [source.topic for source in sources if source.failure]
    log.info("consumer stopped%s", f"; failed sources: {failed}" if failed else "")
    return 1 if failed else 0


def _process_provider(
    settings: Settings, priorities: Sequence[str]
) -> tuple[str | None, Provider, str]:
    """This process's provider: its priorities' own (MAILBUS_PROVIDER_P0_URL, ...) or the
    default one; with its name in ``email_sends.provider`` (the priority; None for the
    default) and its URL. One process, one provider: its breaker, pauses and recovery
    ramp describe that provider alone."""
    own = {settings.provider_for(priority) for priority in priorities}
    if len(own) > 1:
        first = next(p[0] for p in own if p is not None)
        raise ConfigError(
            f"MAILBUS_PROVIDER_{first.upper()}_URL",
            f"--priority {','.join(priorities)} mixes providers: run one process per provider",
        )
    chosen = own.pop()
    if chosen is not None:
        priority, url, api_key = chosen
        return priority, _templated(settings, _http_provider(settings, url, api_key)), url
    url = settings.smtp_url if settings.provider == "smtp" else settings.provider_url
    if settings.provider == "ses":
        url = settings.ses_endpoint_url or f"ses:{settings.ses_region or 'default'}"
    primary = _templated(settings, _primary_provider(settings), dict(settings.provider_templates))
    return None, primary, url


def _templated(
    settings: Settings, provider: Provider, references: dict[str, str] | None = None
) -> Provider:
    """``provider`` with its mails' content from the local templates (MAILBUS_TEMPLATES_DIR)
    and, for the primary one, the provider's own (MAILBUS_PROVIDER_TEMPLATES)."""
    if settings.templates_dir is None and not references:
        return provider  # today's content: the variables' subject/text/html
    store = TemplateStore(settings.templates_dir) if settings.templates_dir else None
    return TemplatedProvider(provider, store, references)


def _primary_provider(settings: Settings) -> Provider:
    """MAILBUS_PROVIDER: the HTTP API (default), an SMTP server or a named provider."""
    dialect = _named_dialect(settings)
    if dialect is not None:
        return HttpProvider(
            settings.provider_url,
            settings.provider_api_key,
            connect_timeout=settings.connect_timeout,
            request_timeout=settings.request_timeout,
            max_connections=settings.max_in_flight,
            dialect=dialect,
            key_file=settings.provider_api_key_file,
        )
    if settings.provider == "ses":
        from mailbus.consumer.providers.ses import SesProvider  # boto3: the [ses] extra

        return SesProvider(
            settings.mail_from,
            region=settings.ses_region,
            endpoint_url=settings.ses_endpoint_url,
            access_key_id=settings.ses_access_key_id,
            secret_access_key=settings.ses_secret_access_key,
            configuration_set=settings.ses_configuration_set,
            connect_timeout=settings.connect_timeout,
            request_timeout=settings.request_timeout,
            max_connections=settings.max_in_flight,
        )
    if settings.provider == "smtp":
        return SmtpProvider(
            settings.smtp_url,
            settings.smtp_from,
            password=settings.smtp_password,
            connect_timeout=settings.connect_timeout,
            request_timeout=settings.request_timeout,
            max_connections=settings.max_in_flight,
            allow_plaintext_auth=settings.smtp_allow_plaintext_auth,
        )
    return _http_provider(
        settings,
        settings.provider_url,
        settings.provider_api_key,
        settings.provider_api_key_file,
    )


def _named_dialect(settings: Settings) -> Dialect | None:
    """The dialect of a named HTTP provider (docs/providers.md); None for http, smtp, ses."""
    if settings.provider == "postmark":
        return PostmarkDialect(settings.mail_from)
    if settings.provider == "resend":
        return ResendDialect(settings.mail_from, settings.idempotency_window or RESEND_WINDOW_S)
    if settings.provider == "sendgrid":
        return SendGridDialect(settings.mail_from)
    if settings.provider == "mailgun":
        return MailgunDialect(settings.mail_from, settings.mailgun_domain)
    return None


def _http_provider(
    settings: Settings, url: str, api_key: str, key_file: str | None = None
) -> HttpProvider:
    return HttpProvider(
        url,
        api_key,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_in_flight,
        key_file=key_file,
    )


class _HealthReporter:
    """Writes this process's breaker state to ``provider_health`` on change and every 10 s."""

    def __init__(self, ledger: SendLedger, provider_url: str) -> None:
        self._ledger = ledger
        self._provider = provider_url
        self._process = f"{socket.gethostname()}:{os.getpid()}"
        self._state = BreakerState.CLOSED
        self._changed = asyncio.Event()

    def breaker_changed(self, state: BreakerState) -> None:
        log.warning("circuit breaker for %s is now %s", self._provider, state.value)
        metrics.set_breaker_state(self._provider, state.value)
        self._state = state
        self._changed.set()

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            report = self._ledger.report_health(self._process, self._provider, self._state.value)
            try:
                await asyncio.wait_for(report, 5.0)  # /readyz: the database answers in time
                health.mark("database", True)
            except (StorageError, TimeoutError) as exc:
                health.mark("database", False, "unreachable")
                log.warning("database health report failed: %s", exc or "timed out")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._first(stopping, self._changed), 10.0)

    @staticmethod
    async def _first(*events: asyncio.Event) -> None:
        waits = [asyncio.create_task(event.wait()) for event in events]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
