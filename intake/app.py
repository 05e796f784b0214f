"""``mailbus intake``: the faust-streaming app that reads domain events into ``email_sends``.

One agent reads ``MAILBUS_INTAKE_TOPIC`` in batches (``stream.noack_take``: up to
``MAILBUS_INTAKE_BATCH`` events, or what came within ``MAILBUS_INTAKE_BATCH_WAIT``),
hands each batch to :class:`~mailbus.intake.service.IntakeService` and acknowledges the batch's
events only after it returned, i.e. after the dead letters were acknowledged by the broker
and the rows' transaction committed. faust commits, per partition, the offset below which
every event was acknowledged, so a Kafka offset never passes an event whose row is not
committed. (``stream.take`` would not do: it acknowledges a batch in a ``finally``, so an
exception in the loop body, or the worker stopping mid-batch, would acknowledge events
whose rows were never written.) A crash or SIGKILL between the commit and faust's next
offset commit replays those events; their rows exist, and ``ON CONFLICT DO NOTHING``
makes the replay a no-op.

One batch is written (PostgreSQL, the DLQ) while faust buffers and the agent prepares
the next (decoding and validation are CPU, the insert mostly waits on PostgreSQL); the
writes stay one at a time and in order, and so do the acknowledgements.

faust and aiokafka appear only in this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import threading
import time
from typing import Any

from mailbus.kernel import health
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.extras import extra
from mailbus.kernel.kafka_security import KafkaSecurity, kafka_client_config
from mailbus.kernel.metrics import observe_intake_lag
from mailbus.kernel.settings import Settings
from mailbus.kernel.signals import stop_on_signals
from mailbus.kernel.topics import create_topics
from mailbus.kernel.tracers import configured_tracer
from mailbus.schemas.registry import RegistryWriters, settings_registry_client
from mailbus_client.policies import configured_policy_book

from .config import IntakeConfig
from .dead_letters import DeadLetterProducer
from .events import EventReader
from .mappings import load_mappings
from .rows import RowWriter
from .service import Incoming, IntakeService, PreparedBatch

with extra("intake"):
    import faust
    from mode import CrashingSupervisor

__all__ = ["broker_credentials", "build_app", "run_intake"]

log = logging.getLogger("mailbus.intake")


def build_app(settings: Settings, config: IntakeConfig, service: IntakeService) -> faust.App:
    """The faust app with its one agent; nothing connects until a worker starts it."""
    app = faust.App(
        config.group,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=broker_credentials(settings.kafka_security),
        datadir=str(config.state_dir / f"faust-{config.group}"),
        store="memory://",
        autodiscover=False,
        web_enabled=config.web_port is not None,
        web_port=config.web_port or 6066,
        web_bind="127.0.0.1",
        consumer_auto_offset_reset="earliest",
        topic_replication_factor=settings.replication_factor,
        topic_partitions=settings.partitions,
        broker_session_timeout=config.session_timeout,
        broker_heartbeat_interval=min(3.0, config.session_timeout / 3),
        broker_commit_interval=1.0,
        # On stop and on rebalance, faust would otherwise wait, without end, for every
        # event handed to the agent to be acknowledged: while PostgreSQL refuses a batch
        # SIGTERM never finished. Not waiting is safe: what was not acknowledged is read
        # again, and a row that was committed meanwhile makes the replay a no-op.
        stream_wait_empty=False,
        stream_buffer_maxsize=max(4 * config.batch_size, 4096),
        producer_acks=-1,
        # A topic created after the intake joined its group (a fresh broker: `make demo`)
        # was read only at the consumer's next metadata refresh, 5 minutes by default.
        consumer_metadata_max_age_ms=10_000,
    )
    topic = app.topic(config.topic, key_serializer="raw", value_serializer="raw")

    async def write(prepared: PreparedBatch, events: Any, stream: Any) -> None:
        await service.apply(prepared)
        for event in events:  # only now: the rows are committed, the dead letters on Kafka
            await stream.ack(event)
        last = {event.message.tp: event.message.offset for event in events}
        for tp, offset in last.items():  # mailbus_intake_lag: what is left to read
            observe_intake_lag(tp.partition, app.consumer.highwater(tp) - offset - 1)

    async def intake(stream: Any) -> None:
        # One batch is written while the next is read and prepared: the loop body returns
        # (and faust buffers again) once the batch before is written and acknowledged,
        # so acknowledgements stay in order and at most one batch is unacknowledged
        # beyond the one being read.
        events: Any
        writing: asyncio.Task[None] | None = None
        try:
            async for events in stream.noack_take(config.batch_size, within=config.batch_wait):
                prepared = service.prepare([_incoming(event) for event in events])
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(write(prepared, list(events), stream))
            if writing is not None:
                await writing
        finally:
            if writing is not None and not writing.done():
                writing.cancel()  # not acknowledged: read again after a restart
                with contextlib.suppress(asyncio.CancelledError):
                    await writing
            await service.close()

    app.agent(topic, name="intake", supervisor_strategy=CrashingSupervisor)(intake)
    return app


def broker_credentials(security: KafkaSecurity) -> faust.auth.Credentials | None:
    """faust's form of the MAILBUS_KAFKA_* TLS and SASL settings (the librdkafka clients
    take them from :func:`kafka_client_config`). OAUTHBEARER is refused: faust and aiokafka
    want a token callback, and the intake has no OIDC client to feed one."""
    if security.protocol == "PLAINTEXT":
        return None
    if security.sasl_mechanism == "OAUTHBEARER":
        raise ConfigError(
            "MAILBUS_KAFKA_SASL_MECHANISM",
            "OAUTHBEARER is not supported by `mailbus intake` (faust/aiokafka): give the"
            " intake a SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN user",
        )
    context = None
    if security.protocol.endswith("SSL"):  # hostnames verified, as librdkafka does
        context = ssl.create_default_context(cafile=security.ssl_ca_location)
        if security.ssl_certificate_location and security.ssl_key_location:
            context.load_cert_chain(
                security.ssl_certificate_location,
                security.ssl_key_location,
                security.ssl_key_password or None,
            )
    if security.sasl_mechanism is None:
        return faust.SSLCredentials(context)
    return faust.SASLCredentials(
        username=security.sasl_username,
        password=security.sasl_password,
        mechanism=security.sasl_mechanism,
        ssl_context=context,
    )


def _incoming(event: Any) -> Incoming:
    message = event.message
    headers = message.headers or ()
    pairs = headers.items() if isinstance(headers, dict) else headers
    return Incoming(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=tuple((str(name), bytes(value or b"")) for name, value in pairs),
    )


def _pass_on_early_stop(stop: threading.Event, ours: object) -> None:
    """A SIGTERM or SIGINT that came before faust's worker took the signals (while the
    intake started: its imports, its topics, the worker's own start; or the schema guard's,
    mailbus/kernel/schema_guard.py) only set the command line's ``stop``
    (mailbus/kernel/signals.py), and the worker ran on, never stopping. Once the worker
    has put its own handler in place, it is sent SIGTERM, and stops as it would have."""
    stop.wait()
    while signal.getsignal(signal.SIGTERM) is ours:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)


def run_intake(settings: Settings, config: IntakeConfig, log_level: str = "WARNING") -> int:
    """Run until SIGTERM/SIGINT (then exit 0), or until the agent crashes (exit 1)."""
    mappings = load_mappings(config.mappings_path)
    registry = None
    if settings.schema_registry_url is not None:
        registry = RegistryWriters(settings_registry_client(settings))
    reader = EventReader(mappings, configured_policy_book(), registry)
    create_topics(settings, [config.topic, config.dlq_topic])
    if logging.getLevelName(log_level) != logging.DEBUG:
        for noisy in ("faust", "mode", "aiokafka"):  # their INFO is a line per service step
            logging.getLogger(noisy).setLevel(logging.WARNING)
    log.info(
        "intake reading %s as group %s (%s), batches of up to %d, dead letters to %s",
        config.topic,
        config.group,
        ", ".join(mapping.event for mapping in mappings),
        config.batch_size,
        config.dlq_topic,
    )
    config.state_dir.mkdir(parents=True, exist_ok=True)
    if settings.metrics_port is not None:
        from mailbus.kernel.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)
    health.mark("intake", True)  # until a batch cannot be written (/readyz)
    writer = RowWriter(
        settings.database_url, config.max_age_s, settings.database_transaction_pooling
    )
    dlq = DeadLetterProducer(kafka_client_config(settings), config.dlq_topic)
    tracer = configured_tracer(settings.otel_exporter, "mailbus-intake")
    service = IntakeService(reader, writer, dlq, tracer)
    app = build_app(settings, config, service)
    worker = faust.Worker(
        app,
        loglevel=log_level,
        quiet=True,
        redirect_stdouts=False,
        override_logging=False,
    )
    worker.spinner = None  # a terminal progress spinner: escape codes in a service's log
    stop = stop_on_signals()
    early = threading.Thread(
        target=_pass_on_early_stop,
        args=(stop, signal.getsignal(signal.SIGTERM)),
        name="intake-early-stop",
        daemon=True,
    )
    early.start()
    code: int | str | None = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code
    finally:
        dlq.close()
    stats = service.stats
    log.info(
        "intake stopped: %d events in %d batches, %d rows inserted,"
        " %d too old (recorded expired), %d dead letters",
        stats.events,
        stats.batches,
        stats.inserted,
        stats.too_old,
        stats.dead_letters,
        extra={
            "events": stats.events,
            "batches": stats.batches,
            "inserted": stats.inserted,
            "too_old": stats.too_old,
            "dead_letters": stats.dead_letters,
        },
    )
    return code if isinstance(code, int) else 1
