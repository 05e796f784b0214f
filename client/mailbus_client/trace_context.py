"""The W3C trace context of the caller's current OpenTelemetry span, for the row it enqueues.

OpenTelemetry is optional: when ``opentelemetry`` is not importable, or no span is active
(an invalid span context), there is no context and the row's ``traceparent`` stays NULL.
The relay and the consumer continue the trace from the row (docs/guides/tracing.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

__all__ = ["TraceContext", "current_trace_context"]

TraceContext = tuple[str | None, str | None]  # (traceparent, tracestate)


def current_trace_context() -> TraceContext:
    """``(traceparent, tracestate)`` of the active span, else ``(None, None)``."""
    inject = _injector()
    if inject is None:
        return None, None
    carrier: dict[str, str] = {}
    inject(carrier)  # writes nothing when the current span context is invalid
    return carrier.get("traceparent"), carrier.get("tracestate")


@cache
def _injector() -> Callable[[dict[str, str]], None] | None:
    """The W3C propagator's ``inject``, looked up once: a failed import is not retried."""
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    return TraceContextTextMapPropagator().inject
