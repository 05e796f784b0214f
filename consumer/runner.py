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
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from mailbus.consumer.adapter import Provider
from mailbus.consumer.content import TemplatedProvider
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.backoff import with_schedule
from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.recovery import RecoveryPolicy
from mailbus.consumer.gate import ProviderGate
from mailbus.consumer.kafka_source import KafkaSource
from mailbus.consumer.ledger import MessageOrigin, SendLedger
from mailbus.consumer.provider import Endpoint, http_provider
from mailbus.consumer.rate_limit import GlobalRateLimiter
from mailbus.consumer.reconciler import Reconciler
from mailbus.consumer.recovery_pacer import RecoveryPacer
from mailbus.consumer.service import DeliveryService, Stopping
from mailbus.consumer.templates import TemplateStore
from mailbus.kernel import health, metrics
from mailbus.kernel.errors import ConfigError, StorageError
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracers import configured_tracer
from mailbus.schemas.registry import pointer_codec
from mailbus_client.policies import configured_policy_book

__all__ = ["lease_seconds", "run_consumer", "slot_wait_seconds", "window_margin_seconds"]

log = logging.getLogger("mailbus.consumer")


class NamedSender(Protocol):
    """A named provider as the consumer sees it (mailbus.providers.room.NamedProvider)."""

    def provider(self, settings: Settings, endpoint: Endpoint) -> Provider:
        """The provider it sends through (an HTTP one at ``endpoint``)."""
        ...

    def url(self, settings: Settings) -> str:
        """Where it is reached, as the breaker's health reports name it."""
        ...


# MAILBUS_PROVIDER's value -> the named provider (mailbus.providers.registry.senders)
Senders = Mapping[str, NamedSender]


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


def run_consumer(settings: Settings, priorities: Sequence[str], senders: Senders) -> int:
    """Serve until stopped; ``senders``: the named providers by MAILBUS_PROVIDER's value."""
    return asyncio.run(_serve(settings, priorities, senders))


async def _serve(settings: Settings, priorities: Sequence[str], senders: Senders) -> int:
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
        transaction_pooling=settings.database_transaction_pooling,
    )
    own, provider, provider_url = _process_provider(settings, priorities, senders)
    reporter = _HealthReporter(ledger, provider_url)
    recovery = None
    if settings.recovery_rate is not None:
        recovery = RecoveryPacer(
            settings.database_url,
            provider_url,
            RecoveryPolicy(settings.recovery_rate, settings.recovery_ramp, settings.recovery_after),
            transaction_pooling=settings.database_transaction_pooling,
        )
    gate = ProviderGate(
        settings.max_in_flight,
        BreakerPolicy(),
        GlobalRateLimiter(
            settings.database_url,
            settings.rate_limit,
            transaction_pooling=settings.database_transaction_pooling,
        )
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
    fallback = _fallback_provider(settings, senders)
    # the fallback's breaker in provider_health too (`mailbus status`), as a process of its own
    fallback_reporter = _HealthReporter(
        ledger,
        f"fallback:{settings.fallback_provider_url or settings.fallback_provider}",
        "/fallback",
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
        fallback_kind=settings.fallback_provider or "http",
        fallback_gate=_fallback_gate(settings, fallback_reporter.breaker_changed),
        tracer=configured_tracer(settings.otel_exporter, "mailbus-consumer"),
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
    fallback_reporting = (
        asyncio.create_task(fallback_reporter.run(service.stopping)) if fallback else None
    )
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
    if fallback_reporting is not None:
        await fallback_reporting
    await provider.aclose()
    await gate.close()
    await service.fallback_gate.close()
    if recovery is not None:
        await recovery.close()
    if fallback is not None:
        await fallback.aclose()
    await ledger.close()
    failed = [source.topic for source in sources if source.failure]
    log.info("consumer stopped%s", f"; failed sources: {failed}" if failed else "")
    return 1 if failed else 0


def _process_provider(
    settings: Settings, priorities: Sequence[str], senders: Senders
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
        priority, url, api_key, key_file = chosen
        return (
            priority,
            _templated(settings, http_provider(settings, Endpoint(url, api_key, key_file))),
            url,
        )
    named = senders.get(settings.provider)
    url = settings.provider_url if named is None else named.url(settings)
    endpoint = Endpoint(
        settings.provider_url, settings.provider_api_key, settings.provider_api_key_file
    )
    primary = _provider(settings, named, endpoint)
    return None, _templated(settings, primary, dict(settings.provider_templates)), url


def _fallback_provider(settings: Settings, senders: Senders) -> Provider | None:
    """MAILBUS_FALLBACK_PROVIDER, built as MAILBUS_PROVIDER is, with its own URL and key
    (its mail's content from the local templates only); None: no fallback."""
    if settings.fallback_provider is None:
        return None
    endpoint = Endpoint(
        settings.fallback_provider_url or "",
        settings.fallback_provider_api_key,
        settings.fallback_provider_api_key_file,
    )
    return _templated(
        settings, _provider(settings, senders.get(settings.fallback_provider), endpoint)
    )


def _fallback_gate(settings: Settings, changed: Callable[[BreakerState], None]) -> ProviderGate:
    """The fallback's own breaker, pauses and rate limit (MAILBUS_FALLBACK_RATE_LIMIT): its
    account, quota and server failures open it (docs/providers.md#the-fallback-provider), as
    the primary's open the primary's."""
    return ProviderGate(
        settings.max_in_flight,
        BreakerPolicy(),
        GlobalRateLimiter(
            settings.database_url,
            settings.fallback_rate_limit,
            name="fallback",
            transaction_pooling=settings.database_transaction_pooling,
        )
        if settings.fallback_rate_limit
        else None,
        on_breaker_change=changed,
        on_limit_change=lambda _limit: None,
        default_pause_s=settings.backoff_base,
    )


def _templated(
    settings: Settings, provider: Provider, references: dict[str, str] | None = None
) -> Provider:
    """``provider`` with its mails' content from the local templates (MAILBUS_TEMPLATES_DIR)
    and, for the primary one, the provider's own (MAILBUS_PROVIDER_TEMPLATES)."""
    if settings.templates_dir is None and not references:
        return provider  # today's content: the variables' subject/text/html
    store = TemplateStore(settings.templates_dir) if settings.templates_dir else None
    return TemplatedProvider(provider, store, references)


def _provider(settings: Settings, named: NamedSender | None, endpoint: Endpoint) -> Provider:
    """MAILBUS_PROVIDER's (or the fallback's) provider: the HTTP API at ``endpoint``
    (``http``, the default) or the named provider (docs/providers.md)."""
    if named is None:
        return http_provider(settings, endpoint)
    return named.provider(settings, endpoint)


class _HealthReporter:
    """Writes this process's breaker state to ``provider_health`` on change and every 10 s."""

    def __init__(self, ledger: SendLedger, provider_url: str, suffix: str = "") -> None:
        self._ledger = ledger
        self._provider = provider_url
        self._process = f"{socket.gethostname()}:{os.getpid()}{suffix}"  # /fallback: its own
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
