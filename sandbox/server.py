"""Running the sandbox: in-process (async or in a thread), blocking for the CLI, and the CLI.

* ``await start(...)`` -> :class:`RunningSandbox` on the current loop (``port=0`` binds a
  free port; read ``.port``/``.url``).
* ``start_in_thread(...)`` -> :class:`ThreadedSandbox`, a context manager serving from its
  own thread and loop, for synchronous tests.
* ``run_sandbox(...)`` blocks until SIGTERM/SIGINT, then shuts down cleanly; it prints
  ``mailbus sandbox listening on <url>`` once bound.
* ``add_arguments(parser)`` and ``main(args) -> int`` are ``mailbus sandbox`` (and
  ``python -m sandbox``): exit 0 after a signal, 2 on bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

from mailbus.kernel.errors import ConfigError
from mailbus.sandbox.app import DEFAULT_API_KEY, SandboxState, make_app
from mailbus.sandbox.emitter import EventEmitter, add_event_arguments, emitter_from_args
from mailbus.sandbox.faults import Fault, FaultPlan, FaultSpecError, parse_fault

__all__ = [
    "RunningSandbox",
    "ThreadedSandbox",
    "add_arguments",
    "main",
    "resolve_api_key",
    "run_sandbox",
    "start",
    "start_in_thread",
]

_T = TypeVar("_T")


@dataclass
class RunningSandbox:
    """A sandbox serving on the current event loop; ``await stop()`` shuts it down."""

    runner: web.AppRunner
    state: SandboxState
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, end hangs, give other handlers ``shutdown_timeout``, close."""
        self.state.closing = True
        await self.runner.cleanup()
        if self.state.emitter is not None:
            await self.state.emitter.close()


async def start(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str = DEFAULT_API_KEY,
    plan: FaultPlan | None = None,
    seed: int | None = None,
    open_control: bool = False,
    shutdown_timeout: float = 2.0,
    emitter: EventEmitter | None = None,
) -> RunningSandbox:
    """Start serving on ``host:port``; in-flight handlers get ``shutdown_timeout`` at stop.
    With ``emitter``, accepted mail gets signed delivery events (closed at stop)."""
    state = SandboxState(api_key, plan, seed, open_control=open_control, emitter=emitter)
    runner = web.AppRunner(make_app(state), access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return RunningSandbox(runner, state, host, runner.addresses[0][1])


class ThreadedSandbox:
    """A sandbox on its own thread and event loop; use as a context manager or ``stop()``."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._server: RunningSandbox | None = None
        self._thread = threading.Thread(target=self._run, name="mailbus-sandbox", daemon=True)

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.port

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return self._server.url

    def start(self, timeout: float = 10.0) -> ThreadedSandbox:
        """Start the thread and wait until the port is bound (re-raising a bind error)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("sandbox did not start in time")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def call(self, fn: Callable[[SandboxState], _T], timeout: float = 10.0) -> _T:
        """Run ``fn(state)`` on the sandbox's loop (state is not thread-safe) and return it."""
        assert self._loop is not None and self._server is not None, "not started"
        state = self._server.state
        result: Future[_T] = Future()

        def run() -> None:
            try:
                result.set_result(fn(state))
            except BaseException as exc:
                result.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return result.result(timeout)

    def stop(self) -> None:
        """Shut the server down and join its thread; idempotent."""
        if self._loop is not None and self._stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> ThreadedSandbox:
        return self if self._thread.is_alive() else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            self._server = await start(**self._options)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._server.stop()


def start_in_thread(**options: Any) -> ThreadedSandbox:
    """A started :class:`ThreadedSandbox`; ``options`` are those of :func:`start`."""
    return ThreadedSandbox(**options).start()


def run_sandbox(
    host: str,
    port: int,
    api_key: str,
    plan: FaultPlan | None = None,
    seed: int | None = None,
    *,
    open_control: bool = False,
    emitter: EventEmitter | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then stop cleanly; raises ``OSError`` if it cannot bind."""
    asyncio.run(_serve(host, port, api_key, plan, seed, open_control, emitter))


async def _serve(
    host: str,
    port: int,
    api_key: str,
    plan: FaultPlan | None,
    seed: int | None,
    open_control: bool,
    emitter: EventEmitter | None,
) -> None:
    server = await start(
        host=host,
        port=port,
        api_key=api_key,
        plan=plan,
        seed=seed,
        open_control=open_control,
        emitter=emitter,
    )
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stopping.set)
    try:
        print(f"mailbus sandbox listening on {server.url}", flush=True)
        if server.state.plan.faults or server.state.plan.latency_ms:
            print(f"mailbus sandbox fault plan: {server.state.plan.to_dict()}", flush=True)
        if emitter is not None:
            urls = [emitter.url, *(route.url for route in emitter.native.values())]
            where = ", ".join(url for url in urls if url)
            print(f"mailbus sandbox delivery events to {where}: {emitter.plan}", flush=True)
        await stopping.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await server.stop()
    print("mailbus sandbox stopped", flush=True)


def resolve_api_key(given: str | None) -> str:
    """``--api-key``, else ``$MAILBUS_PROVIDER_API_KEY``, else ``_FILE``, else the default."""
    if given is None:
        given = os.environ.get("MAILBUS_PROVIDER_API_KEY")
    if given is None and (path := os.environ.get("MAILBUS_PROVIDER_API_KEY_FILE")):
        try:
            given = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                "MAILBUS_PROVIDER_API_KEY_FILE", f"unreadable: {exc.strerror}"
            ) from None
    if given is None:
        return DEFAULT_API_KEY
    if not given or any(ch.isspace() for ch in given):
        raise ConfigError("--api-key", "must be non-empty and contain no whitespace")
    return given


def _fault_arg(spec: str) -> Fault:
    try:
        return parse_fault(spec)
    except FaultSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _latency_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sandbox's options to ``parser`` (``mailbus sandbox``)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8025, help="port to bind, 0 = any (8025)")
    parser.add_argument(
        "--api-key",
        default=None,
        help="accepted bearer key (default: $MAILBUS_PROVIDER_API_KEY, its _FILE, "
        f"else {DEFAULT_API_KEY!r})",
    )
    parser.add_argument(
        "--latency-ms", type=_latency_arg, default=0.0, help="base latency of every send (0)"
    )
    parser.add_argument(
        "--fault",
        type=_fault_arg,
        action="append",
        default=None,
        metavar="SPEC",
        help="repeatable; KIND[:share=F|:next=N][:ms=..][:retry_after=..][:hang_seconds=..], "
        "KIND one of slow, 429, 503, 422, drop_before_accept, drop_after_accept, "
        "hang_after_accept, malformed; e.g. 429:share=0.2:retry_after=3",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault dice")
    add_event_arguments(parser)
    parser.add_argument(
        "--open-control",
        action="store_true",
        help="serve /_sandbox/* to non-loopback clients too (e.g. inside a container)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the sandbox from parsed arguments until a signal; 0, or 2 on bad configuration."""
    try:
        api_key = resolve_api_key(args.api_key)
        if not 0 <= args.port <= 65535:
            raise ConfigError("--port", "must be within 0..65535")
        plan = FaultPlan(latency_ms=args.latency_ms, faults=tuple(args.fault or ()))
        emitter = emitter_from_args(args)
        run_sandbox(
            args.host,
            args.port,
            api_key,
            plan,
            args.seed,
            open_control=args.open_control,
            emitter=emitter,
        )
    except ConfigError as exc:
        print(f"mailbus sandbox: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = f"{args.host}:{args.port}"
        print(
            f"mailbus sandbox: --host/--port: cannot listen on {where}: {reason}", file=sys.stderr
        )
        return 2
    return 0
