"""Liveness and readiness of a long-running process, served beside ``/metrics``.

``/healthz`` answers 200 while the process serves requests at all. ``/readyz`` answers 200
only when every component the process registered is ready (the database reachable, the
Kafka group joined, not draining) and 503 otherwise; both bodies are JSON naming each
component and why. Components report through :func:`mark` from any thread.
"""

from __future__ import annotations

import threading

__all__ = ["mark", "readiness"]

_lock = threading.Lock()
_components: dict[str, tuple[bool, str]] = {}


def mark(component: str, ready: bool, detail: str = "") -> None:
    """Record whether ``component`` is ready now (``detail``: why not, kept short)."""
    with _lock:
        _components[component] = (ready, detail[:200])


def readiness() -> tuple[bool, dict[str, dict[str, object]]]:
    """Whether the process is ready, and each component's state. Ready needs at least one
    component: a process that registered none has not started its work yet."""
    with _lock:
        components = dict(_components)
    ready = bool(components) and all(ok for ok, _ in components.values())
    return ready, {name: {"ready": ok, "detail": why} for name, (ok, why) in components.items()}
