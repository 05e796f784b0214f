"""Liveness and readiness of a long-running process, served beside ``/metrics``.

``/healthz`` answers 200 while the process serves requests at all. ``/readyz`` answers 200
only when every component the process registered is ready (the database reachable, the
Kafka group joined, not draining) and 503 otherwise; both bodies are JSON naming each
component and why. Components report through :func:`mark` from any thread.

Readiness tells the truth rather than the last known state (docs/runbook.md#probes):

- a component marked with ``heartbeat_s`` must mark again within that many seconds: a
  worker thread that died, or hangs in a call to a black-holed database, goes stale and
  the process unready (then the liveness of its pod's restart policy takes over);
- a :func:`probe` (the database round trip the composition root registers, with its own
  timeout) is asked at every ``/readyz``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["mark", "probe", "readiness"]

Probe = Callable[[], tuple[bool, str]]

_lock = threading.Lock()
_components: dict[str, tuple[bool, str, float, float | None]] = {}
_probes: dict[str, Probe] = {}


def mark(component: str, ready: bool, detail: str = "", heartbeat_s: float | None = None) -> None:
    """Record whether ``component`` is ready now (``detail``: why not, kept short); with
    ``heartbeat_s``, it is ready only until that long after this mark."""
    with _lock:
        _components[component] = (ready, detail[:200], time.monotonic(), heartbeat_s)


def probe(component: str, check: Probe | None) -> None:
    """Ask ``check`` (``(ready, why not)``, bounded in time by itself) at every readiness
    question; None removes it."""
    with _lock:
        if check is None:
            _probes.pop(component, None)
        else:
            _probes[component] = check


def readiness(
    clock: Callable[[], float] = time.monotonic,
) -> tuple[bool, dict[str, dict[str, object]]]:
    """Whether the process is ready, and each component's state. Ready needs at least one
    component: a process that registered none has not started its work yet."""
    with _lock:
        components = dict(_components)
        probes = dict(_probes)
    now = clock()
    states: dict[str, tuple[bool, str]] = {}
    for name, (ok, why, at, heartbeat_s) in components.items():
        if ok and heartbeat_s is not None and now - at > heartbeat_s:
            ok, why = False, f"no heartbeat for {now - at:.0f} s"
        states[name] = (ok, why)
    for name, check in probes.items():
        try:
            states[name] = check()
        except Exception as exc:  # a probe that fails says so; /readyz never answers 500
            states[name] = (False, f"{type(exc).__name__}: {exc}"[:200])
    ready = bool(components) and all(ok for ok, _ in states.values())
    return ready, {name: {"ready": ok, "detail": why} for name, (ok, why) in states.items()}
