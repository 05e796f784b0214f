"""`mailbus console`: serve the console until SIGTERM/SIGINT.

It listens on ``MAILBUS_CONSOLE_LISTEN`` (127.0.0.1:8027: only this machine, unless told
otherwise) and serves ``/healthz`` and ``/readyz`` there; with ``MAILBUS_METRICS_PORT``,
also beside ``/metrics`` as the other processes do (the Kubernetes probes and the compose
healthcheck use that port). Its own reads (the overview, a search's keys, a campaign's
figures, ``/readyz``) take a connection of a pool opened at start (:data:`POOL_SIZE`) and
closed at stop, each checked before use, so a connection the server dropped is replaced,
not answered with an error. On a signal it stops listening, lets requests finish (5 s),
stops replays between two letters, closes the pool, and exits 0.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

import psycopg
from aiohttp import web
from psycopg_pool import ConnectionPool

from mailbus.console.access import load_users
from mailbus.console.actions import add_actions
from mailbus.console.login import add_login
from mailbus.console.pages import add_pages
from mailbus.console.web import CONSOLE, Console, add_routes, guard
from mailbus.consumer.dead_letter_views import DEFAULT_REPLAY_RATE
from mailbus.kernel import health, metrics, schema_guard
from mailbus.kernel.durations import parse_rate
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings

__all__ = ["console_from_settings", "make_app", "open_pool", "run_console"]

POOL_SIZE = (1, 8)  # connections kept open, at most: pages run in worker threads


def open_pool(database_url: str) -> ConnectionPool:
    """The console's pool, opened without waiting (a database down at start makes
    ``/readyz`` answer 503, not the console fail)."""
    pool: ConnectionPool = ConnectionPool(
        database_url,
        min_size=POOL_SIZE[0],
        max_size=POOL_SIZE[1],
        kwargs={"connect_timeout": 5},
        configure=schema_guard.check,  # a database restored behind the build
        check=ConnectionPool.check_connection,
        timeout=5,  # waiting for a free connection: then the page answers 400, /readyz 503
        name="mailbus-console",
        open=False,
    )
    pool.open(wait=False)
    return pool


def make_app(console: Console) -> web.Application:
    # Every body read whole (a form, sign-in included) is bounded; the upload is streamed
    # with limits of its own (console/upload.py).
    app = web.Application(middlewares=[guard], client_max_size=console.max_body)
    app[CONSOLE] = console
    add_routes(app)
    add_login(app)
    add_pages(app)
    add_actions(app)
    return app


Overview = Callable[[psycopg.Connection[Any]], dict[str, Any]]


def console_from_settings(settings: Settings, overview: Overview) -> Console:
    if not settings.console_users_file and not settings.console_proxy_header:
        raise ConfigError(
            "MAILBUS_CONSOLE_USERS_FILE",
            "must be set (or MAILBUS_CONSOLE_PROXY_HEADER): the console has no users",
        )
    if settings.console_proxy_header and not (
        settings.console_proxy_secret or settings.console_proxy_sources
    ):
        raise ConfigError(
            "MAILBUS_CONSOLE_PROXY_HEADER",
            "needs MAILBUS_CONSOLE_PROXY_SECRET or MAILBUS_CONSOLE_PROXY_SOURCES: otherwise"
            " whoever reaches the port may name any user",
        )
    return Console(
        database_url=settings.database_url,
        users=load_users(settings.console_users_file),
        overview=overview,
        proxy_header=settings.console_proxy_header,
        proxy_secret=settings.console_proxy_secret,
        proxy_sources=settings.console_proxy_sources,
        secure_cookie=settings.console_secure_cookie,
        max_body=settings.console_max_body,
        upload_max_bytes=settings.console_upload_max_bytes,
        upload_max_rows=settings.console_upload_max_rows,
        replay_rate=parse_rate(DEFAULT_REPLAY_RATE),
        import_part=settings.campaign_import_part,
        key_prefix=settings.provider_key_prefix,
    )


def run_console(settings: Settings, overview: Overview) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean stop."""
    return asyncio.run(_serve(settings, console_from_settings(settings, overview)))


async def _serve(settings: Settings, console: Console) -> int:
    console.pool = open_pool(settings.database_url)
    try:
        return await _listen(settings, console)
    finally:
        await asyncio.to_thread(console.pool.close)


async def _listen(settings: Settings, console: Console) -> int:
    runner = web.AppRunner(make_app(console), access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    host, port = settings.console_listen
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            "MAILBUS_CONSOLE_LISTEN", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    if settings.metrics_port is not None:
        metrics.start_metrics_server(settings.metrics_port)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    bound = runner.addresses[0]
    try:
        health.mark("console", True)
        print(f"mailbus console listening on http://{bound[0]}:{bound[1]}", flush=True)
        await stopping.wait()
    finally:
        health.mark("console", False, "draining")
        console.replays.stop.set()
        await runner.cleanup()
    print("mailbus console stopped", flush=True)
    return 0
