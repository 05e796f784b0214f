"""The P0 lane in a process of its own, started and watched by `mailbus relay` (issue 37).

In the relay's process the P0 lane shares one GIL with the pointer workers, which encode
batches of 2,000 newsletters while a campaign drains; a P0 row committed meanwhile waited
for the CPU before its lane even woke (docs/benchmarks/speed.md). :class:`P0LaneProcess`
runs the same lane (a P0-only :class:`~mailbus.relay.relay.Relay`) in a child process
instead, started with ``spawn`` (no copy of the parent's threads, locks or connections):

- **It dies with its parent.** The two share one pipe; the child stops when its parent
  says so on it or at the pipe's end, so a parent killed with SIGKILL ends it too. A
  terminal's Ctrl-C is the parent's to handle: the child ignores SIGINT.
- **The parent notices its end and starts another** after a delay that doubles to
  30 s (a child that ran a minute starts over at 1 s); meanwhile ``relay.p0`` is unready
  in ``/readyz`` with the child's exit code, and the pointer workers take P0 rows that
  waited a second (``claim_due_beside_p0``): a P0 mail waits a second, not for the restart.
- **Readiness and metrics come through the pipe**: every second the child sends its lane's
  readiness (``relay.p0``, the lane's own heartbeat included), which the parent marks with
  a heartbeat of its own (a child hung or gone goes stale), and what its lane observed
  (pointers published, their delay, malformed trace contexts), which the parent's
  ``/metrics`` counts as if the lane were its own.
- **Every relay guarantee holds**: the child is one more relay sharing the table through
  SKIP LOCKED. A crash anywhere before its pass's commit rolls the marks back, so the
  rows are published again (at least once onto Kafka), which the consumer's guarded claim
  absorbs.
- The child arms the schema guard with the parent's build (mailbus/kernel/schema_guard.py)
  and exits 2 when it trips; the parent restarts it, and its own workers stop the process
  when they meet the same database.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from mailbus.kernel import health, metrics, schema_guard
from mailbus.kernel.logs import configure_logging, register_secret, registered_secrets
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracers import configured_tracer
from mailbus.relay.relay import P0_POINTERS, Relay, RelayStats

__all__ = ["COMPONENT", "LaneArgs", "P0LaneProcess", "run_lane"]

COMPONENT = "relay.p0"  # its name in /readyz
REPORT_S = 1.0  # the child reports this often
_STALE_S = 10 * REPORT_S  # no report for this long: the child is hung, or gone
_FIRST_RESTART_S, _LAST_RESTART_S = 1.0, 30.0
_STEADY_S = 60.0  # a child that ran this long was not crash-looping
_FORWARDED = ("observe_published", "observe_relay_delay", "observe_malformed_trace")
log = logging.getLogger("mailbus.relay")


@dataclass(frozen=True)
class LaneArgs:
    """What the child needs of its parent (pickled by ``spawn``)."""

    settings: Settings
    log_level: str
    secrets: frozenset[str]  # masked in its logs as in the parent's
    build_versions: tuple[int, ...]  # the schema guard's build; empty: not armed


@dataclass(frozen=True)
class _Report:
    ready: bool
    detail: str
    stats: RelayStats
    observations: tuple[tuple[str, tuple[Any, ...]], ...]


Target = Callable[[Connection, LaneArgs], None]


class P0LaneProcess:
    """Runs the P0 lane in a child process, again whenever it ends, until ``stop``."""

    def __init__(
        self,
        settings: Settings,
        build_versions: tuple[int, ...] = (),
        target: Target | None = None,
    ) -> None:
        """``build_versions``: the migrations of this build, for the child's schema guard
        (none: not armed). ``target``: the child's entry point, :func:`run_lane` by
        default (a benchmark wraps it)."""
        self._args = LaneArgs(
            settings,
            logging.getLevelName(logging.getLogger().getEffectiveLevel()),
            registered_secrets(),
            build_versions,
        )
        self._target = target or run_lane
        self._ended = RelayStats()  # the counts of children that ended
        self._current = RelayStats()  # the running child's, as last reported
        self.restarts = 0
        self.pid: int | None = None  # the running child's

    @property
    def stats(self) -> RelayStats:
        """The lane's counts over every child, as reported."""
        return self._ended + self._current

    def run(self, stop: threading.Event) -> None:
        """Start the child and relay its reports; start another when it ends; return once
        ``stop`` is set and the child has ended."""
        try:
            self._supervise(stop)
        except BaseException as exc:  # this thread ends: so does the lane's readiness
            health.mark(COMPONENT, False, f"stopped: {type(exc).__name__}: {exc}")
            raise
        health.mark(COMPONENT, False, "stopping")

    def _supervise(self, stop: threading.Event) -> None:
        context = multiprocessing.get_context("spawn")
        delay = _FIRST_RESTART_S
        while not stop.is_set():
            health.mark(COMPONENT, False, "P0 lane process starting")
            ours, theirs = context.Pipe()
            child = context.Process(
                target=self._target, args=(theirs, self._args), name="mailbus-relay-p0"
            )
            started = time.monotonic()
            child.start()
            theirs.close()  # the child's end lives in the child alone: its end is EOF here
            self.pid = child.pid
            self._relay_reports(ours, stop)
            ours.close()  # the child's end of the pipe: it stops, if it still runs
            child.join(60)  # a pass cut short is published again later
            if child.is_alive():
                child.kill()
                child.join()
            self.pid = None
            self._ended, self._current = self.stats, RelayStats()
            if stop.is_set():
                return
            if time.monotonic() - started >= _STEADY_S:
                delay = _FIRST_RESTART_S
            why = f"P0 lane process exited with code {child.exitcode}; restarting"
            health.mark(COMPONENT, False, why)
            log.error("%s in %.0f s", why, delay)
            stop.wait(delay)
            delay = min(delay * 2, _LAST_RESTART_S)
            self.restarts += 1

    def _relay_reports(self, conn: Connection, stop: threading.Event) -> None:
        """Until the child ends: mark its readiness, count what it observed. Once ``stop``
        is set, tell it to stop, and wait up to a minute for its last report."""
        deadline: float | None = None
        while deadline is None or time.monotonic() < deadline:
            try:
                if deadline is None and stop.is_set():
                    deadline = time.monotonic() + 60.0
                    conn.send(None)  # any message: stop
                if not conn.poll(0.25):
                    continue
                report: _Report = conn.recv()
            except (EOFError, OSError):
                return  # the child ended
            health.mark(COMPONENT, report.ready, report.detail, heartbeat_s=_STALE_S)
            self._current = report.stats
            for name, args in report.observations:
                if name in _FORWARDED:
                    getattr(metrics, name)(*args)


def run_lane(conn: Connection, args: LaneArgs) -> None:
    """The child: the P0 lane until its parent stops it or ends; exits 2 if the schema guard
    tripped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the parent stops us
    configure_logging(args.log_level)
    for secret in args.secrets:
        register_secret(secret)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    if args.build_versions:
        schema_guard.arm(args.build_versions, stop.set, schema=args.settings.db_schema)
    observed = _observations_kept()
    settings = args.settings
    relay = Relay(
        settings,
        lanes=frozenset({P0_POINTERS}),
        component=COMPONENT,
        tracer=configured_tracer(settings.otel_exporter, "mailbus-relay"),
    )
    reporter = threading.Thread(
        target=_report_until_stopped, args=(conn, relay, observed, stop), daemon=True
    )
    reporter.start()
    try:
        relay.run(stop)
    finally:
        stop.set()
        reporter.join()
        _send(conn, relay, observed)  # its last counts
        conn.close()
    sys.exit(2 if schema_guard.tripped() is not None else 0)


def _observations_kept() -> deque[tuple[str, tuple[Any, ...]]]:
    """The lane's metric observations, kept for the parent (whose ``/metrics`` serves them)
    instead of counted in this process, which serves none."""
    kept: deque[tuple[str, tuple[Any, ...]]] = deque()

    def keeper(name: str) -> Callable[..., None]:
        def keep(*args: Any) -> None:
            kept.append((name, args))

        return keep

    for name in _FORWARDED:
        setattr(metrics, name, keeper(name))
    return kept


def _report_until_stopped(
    conn: Connection,
    relay: Relay,
    observed: deque[tuple[str, tuple[Any, ...]]],
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        # a failed send: the parent is gone; readable: it said stop, or its end closed
        if not _send(conn, relay, observed) or conn.poll(REPORT_S):
            stop.set()


def _send(conn: Connection, relay: Relay, observed: deque[tuple[str, tuple[Any, ...]]]) -> bool:
    """One report to the parent; False when it is gone."""
    batch = []
    while observed:
        batch.append(observed.popleft())
    state = health.readiness()[1].get(COMPONENT, {"ready": False, "detail": "starting"})
    report = _Report(bool(state["ready"]), str(state["detail"]), relay.stats, tuple(batch))
    try:
        conn.send(report)
    except OSError:
        return False
    return True
