"""`mailbus consume`: wires the adapters, the Kafka sources and the reconciler together.

One process serves one or more priorities; each priority is its own consumer group
(``{prefix}.delivery.{priority}``), so P0 has its own members and never waits behind a
P1/P2 backlog. At most ``MAILBUS_MAX_IN_FLIGHT`` deliveries run at once per process.
SIGTERM/SIGINT: stop taking messages, finish what is in flight, commit, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Sequence

from consumer.core import RetryPolicy
from consumer.kafka_source import KafkaSource
from consumer.ledger import MessageOrigin, SendLedger
from consumer.provider import HttpProvider
from consumer.reconciler import Reconciler
from consumer.service import DeliveryService, Stopping
from mailbus.settings import Settings

__all__ = ["lease_seconds", "run_consumer"]

log = logging.getLogger("mailbus.consumer")


def lease_seconds(settings: Settings) -> float:
    """Long enough for one call and the look-up that may follow it."""
    return settings.connect_timeout + 2 * settings.request_timeout + 5.0


def run_consumer(settings: Settings, priorities: Sequence[str]) -> int:
    return asyncio.run(_serve(settings, priorities))


async def _serve(settings: Settings, priorities: Sequence[str]) -> int:
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    slots = asyncio.Semaphore(settings.max_in_flight)
    ledger = SendLedger(settings.database_url, max_connections=min(settings.max_in_flight, 20))
    provider = HttpProvider(
        settings.provider_url,
        settings.provider_api_key,
        connect_timeout=settings.connect_timeout,
        request_timeout=settings.request_timeout,
        max_connections=settings.max_in_flight,
    )
    policy = RetryPolicy(settings.max_attempts, settings.backoff_base, settings.backoff_cap)
    service = DeliveryService(ledger, provider, policy, lease_seconds(settings))
    await ledger.open()

    async def deliver(origin: MessageOrigin) -> None:
        async with slots:
            if stop.is_set():
                raise Stopping()  # not started: leave it for redelivery
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
            bootstrap=settings.kafka_bootstrap,
            group_id=f"{settings.topic_prefix}.delivery.{priority}",
            topic=settings.topic(priority),
            handler=deliver,
            loop=loop,
            max_outstanding=2 * settings.max_in_flight,
            drain_s=drain_s,
            stop=stop,
        )
        for priority in priorities
    ]
    reconciler = Reconciler(service, priorities, slots)
    reconciling = asyncio.create_task(reconciler.run())
    for source in sources:
        source.start()
    log.info("consuming %s", ", ".join(source.topic for source in sources))
    while any(source.is_alive() for source in sources):
        await asyncio.sleep(0.1)
        if any(source.failure for source in sources):
            stop.set()
    service.stopping.set()
    await reconciling
    await provider.aclose()
    await ledger.close()
    failed = [source.topic for source in sources if source.failure]
    log.info("consumer stopped%s", f"; failed sources: {failed}" if failed else "")
    return 1 if failed else 0
