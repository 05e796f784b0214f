"""`mailbus webhooks`: the delivery-event receiver, an aiohttp adapter over the pure parts.

``POST /webhooks/{provider}`` takes one event. In this order: the raw body is read (at
most 256 KiB, else 413, read no further); a body nesting JSON deeper than 32 levels is
refused (400) before anything else; the ``Mailbus-Signature`` header is verified against it and the
request's path (:mod:`mailbus.feedback.signature`; 401 when missing, malformed, not
matching or more than 300 s from now: nothing is parsed, nothing changes); the body is
parsed (400 naming the field); the event is recorded (:mod:`mailbus.feedback.store`: one
statement for each batch of concurrent requests). Answers:
200 ``{"result": "stored"}`` or ``"duplicate"`` (the event id was seen before; nothing
changed), 202 ``"unmatched"`` (stored, but no send has that message_id), 503 with
``Retry-After`` when PostgreSQL fails (the sender retries; the event id makes the retry
safe).

Every ``sweep_s`` seconds (10) the receiver applies events that had come before their
send recorded its ``message_id`` (:meth:`mailbus.feedback.store.EventStore.apply_late_events`)
and forgets the one-time tokens older than the longest time a native route keeps them
(Mailgun's: twice its tolerance, as a timestamp may lie that far ahead of the clock and
still verify).

With ``MAILBUS_UNSUBSCRIBE_SECRET`` set, the receiver also serves campaign unsubscribe
links (signed with it or with ``MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS``),
``GET``/``POST /unsubscribe/{token}`` (:mod:`mailbus.feedback.unsubscribe_page`).

``GET /healthz`` is 200 while the process serves; ``GET /readyz`` is 200 when PostgreSQL
answers, else 503. On ``MAILBUS_METRICS_PORT`` (the port the Kubernetes probes and the
compose healthcheck use), ``/readyz`` says ready once the receiver serves and not ready
from the moment it drains. SIGTERM/SIGINT: stop listening, let requests in flight finish
(up to 5 s), close the pool, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from mailbus.feedback.events import DeliveryEvent, InvalidEventError, parse_event
from mailbus.feedback.native.inbound import MAX_DEPTH, too_deep
from mailbus.feedback.native.routes import (
    NativeReceiver,
    add_native_routes,
    read_body,
)
from mailbus.feedback.signature import HEADER, verify
from mailbus.feedback.store import EventStore, LateEvents, Recorded
from mailbus.feedback.unsubscribe_page import add_unsubscribe_routes
from mailbus.kernel import health, metrics
from mailbus.kernel.errors import ConfigError, StorageError
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracers import configured_tracer

__all__ = [
    "RunningReceiver",
    "Store",
    "make_app",
    "run_webhooks",
    "start",
]

log = logging.getLogger("mailbus.webhooks")

MAX_BODY = 256 * 1024
_PROVIDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_REFUSED = {
    "missing": "no Mailbus-Signature header",
    "malformed": "Mailbus-Signature is not t=<unix seconds>,v1=<hex> or ,v2=<hex>",
    "mismatch": "signature does not match",
    "stale": "timestamp more than 300 s from now",
}


class Store(Protocol):
    async def record(self, provider: str, event: DeliveryEvent) -> Recorded: ...

    async def ready(self) -> bool: ...

    async def apply_late_events(self) -> LateEvents: ...

    async def remember_token(self, provider: str, token: str, digest: bytes) -> bool: ...

    async def prune_tokens(self, keep_s: float) -> int: ...

    async def unsubscribe(self, address: str, source: str) -> bool: ...


def make_app(
    store: Store,
    secret: str,
    clock: Callable[[], float] = time.time,
    unsubscribe_secret: str = "",
    unsubscribe_previous: str = "",
    native: Sequence[NativeReceiver] = (),
) -> web.Application:
    """The receiver's routes over ``store``; ``clock`` gives unix seconds; with an
    ``unsubscribe_secret`` (and the one before it, ``unsubscribe_previous``), the
    unsubscribe routes too; each ``native`` provider's own route
    (:mod:`mailbus.feedback.native.routes`) before the ``Mailbus-Signature`` one, which is
    served only with a ``secret``."""
    key = secret.encode()

    async def receive(request: web.Request) -> web.Response:
        provider = request.match_info["provider"]
        if not _PROVIDER.fullmatch(provider):
            return _answer(404, error="unknown provider path")
        body = await read_body(request, MAX_BODY)
        if body is None:
            metrics.observe_webhook_rejected("too_large")
            return _answer(413, error=f"body larger than {MAX_BODY} bytes")
        if too_deep(body):
            metrics.observe_webhook_rejected("too_deep")
            return _answer(400, error=f"body: nests deeper than {MAX_DEPTH} levels")
        verdict = verify(request.headers.get(HEADER), request.path, body, key, clock())
        if not verdict.ok:
            metrics.observe_webhook_rejected(verdict.reason)
            log.warning("webhook from %s refused: %s", provider, verdict.reason)
            return _answer(401, error=_REFUSED[verdict.reason])
        try:
            event = parse_event(body)
        except InvalidEventError as exc:
            metrics.observe_webhook_rejected("invalid")
            return _answer(400, error=str(exc))
        try:
            recorded = await store.record(provider, event)
        except StorageError as exc:
            log.error("delivery event %s not recorded: %s", event.event_id, exc)
            return _answer(503, {"Retry-After": "5"}, error="storage unavailable, retry")
        metrics.observe_webhook_event(
            event.type, event.bounce, recorded.result, recorded.suppressed
        )
        return _answer(
            202 if recorded.result == "unmatched" else 200,
            result=recorded.result,
            updated=recorded.updated,
            suppressed=recorded.suppressed,
        )

    async def healthz(_request: web.Request) -> web.Response:
        return _answer(200, status="ok")

    async def readyz(_request: web.Request) -> web.Response:
        if await store.ready():
            return _answer(200, status="ready")
        return _answer(503, status="database unavailable")

    app = web.Application(client_max_size=MAX_BODY)
    add_native_routes(app, store, native)
    if secret:
        app.router.add_post("/webhooks/{provider}", receive)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if unsubscribe_secret:
        add_unsubscribe_routes(app, store, unsubscribe_secret, clock, unsubscribe_previous)
    return app


def _answer(code: int, headers: dict[str, str] | None = None, /, **fields: object) -> web.Response:
    return web.json_response(fields, status=code, headers=headers)


@dataclass
class RunningReceiver:
    """A receiver serving on the current loop; ``await stop()`` shuts it down."""

    runner: web.AppRunner
    host: str
    port: int
    sweeping: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self.sweeping is not None:
            self.sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sweeping
        await self.runner.cleanup()


async def start(
    store: Store,
    secret: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: Callable[[], float] = time.time,
    shutdown_timeout: float = 5.0,
    sweep_s: float | None = 10.0,
    unsubscribe_secret: str = "",
    unsubscribe_previous: str = "",
    native: Sequence[NativeReceiver] = (),
) -> RunningReceiver:
    """Serve on ``host:port`` (0: any free port, see ``.port``); sweep late events every
    ``sweep_s`` seconds (None: never)."""
    app = make_app(store, secret, clock, unsubscribe_secret, unsubscribe_previous, native)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    kept_s = max((route.tokens_kept_s for route in native), default=0.0)
    sweeping = None if sweep_s is None else asyncio.create_task(_sweep(store, sweep_s, kept_s))
    return RunningReceiver(runner, host, runner.addresses[0][1], sweeping)


async def _sweep(store: Store, every_s: float, tokens_kept_s: float) -> None:
    """Late and kept events applied, old tokens pruned, every ``every_s`` seconds, for as
    long as the receiver runs: a pass that fails, whatever the reason, is logged and the
    next one tries again (a task that ended would leave events unapplied for good)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            late = await store.apply_late_events()
            if tokens_kept_s:
                await store.prune_tokens(tokens_kept_s)
        except StorageError as exc:
            log.warning("%s", exc)
            continue
        except Exception:
            log.exception("the webhooks' sweep failed; the next pass tries again")
            continue
        if late.applied:
            metrics.observe_webhook_late(late.applied, late.suppressed)
            log.info(
                "applied %d late delivery events: %d sends updated, %d addresses suppressed",
                late.applied,
                late.updated,
                late.suppressed,
            )


def run_webhooks(settings: Settings, native: Sequence[NativeReceiver]) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean stop. ``native``: the providers' own
    routes the settings enable (:func:`mailbus.providers.registry.receivers`)."""
    if not settings.webhook_secret and not native:
        raise ConfigError("MAILBUS_WEBHOOK_SECRET", "must be set (or MAILBUS_WEBHOOK_SECRET_FILE)")
    return asyncio.run(_serve(settings, native))


async def _serve(settings: Settings, native: Sequence[NativeReceiver]) -> int:
    store = EventStore(
        settings.database_url,
        sent_through=settings.provider,
        key_prefix=settings.provider_key_prefix,
        tracer=configured_tracer(settings.otel_exporter, "mailbus-webhooks"),
        fallback_through=settings.fallback_provider,
        transaction_pooling=settings.database_transaction_pooling,
    )
    await store.open()
    host, port = settings.webhook_listen
    try:
        receiver = await start(
            store,
            settings.webhook_secret,
            host=host,
            port=port,
            unsubscribe_secret=settings.unsubscribe_secret,
            unsubscribe_previous=settings.unsubscribe_secret_previous,
            native=native,
        )
    except OSError as exc:
        await store.close()
        raise ConfigError(
            "MAILBUS_WEBHOOK_LISTEN", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    if settings.metrics_port is not None:
        metrics.start_metrics_server(settings.metrics_port)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, stopping.set)
    try:
        health.mark("webhooks", True)
        log.info("mailbus webhooks listening on %s", receiver.url, extra={"url": receiver.url})
        await stopping.wait()
    finally:
        health.mark("webhooks", False, "draining")
        for signum in signals:
            loop.remove_signal_handler(signum)
        await receiver.stop()
        await store.close()
        for route in native:
            await route.close()
    log.info("mailbus webhooks stopped")
    return 0
