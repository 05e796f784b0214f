"""The OpenTelemetry adapter of :mod:`mailbus.kernel.tracing` (the extra ``mailbus[tracing]``).

Imported only when an exporter is configured (docs/guides/tracing.md). Spans are opened
under the parent's ids given as a remote :class:`~opentelemetry.trace.SpanContext`, never
through OpenTelemetry's own current context: mailbus's context variable
(:func:`mailbus.kernel.tracing.current`) stays the one source of what is current, for the
no-op tracer and this one alike. The parent's sampled flag decides (OpenTelemetry's
default sampler follows the parent); a mail without a context starts its own trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.tracecontext import TraceContext
from mailbus.kernel.tracing import Attributes, Kind, OpenSpan, Span, Tracer, current, use

__all__ = ["OtelTracer", "exporting_tracer", "span_exporter"]


_KINDS = {
    "internal": trace.SpanKind.INTERNAL,
    "producer": trace.SpanKind.PRODUCER,
    "consumer": trace.SpanKind.CONSUMER,
    "client": trace.SpanKind.CLIENT,
    "server": trace.SpanKind.SERVER,
}


class _OtelSpan:
    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, key: str, value: str | int | float | bool) -> None:
        self._span.set_attribute(key, value)


class _OtelOpenSpan(_OtelSpan):
    def __init__(self, span: trace.Span, context: TraceContext) -> None:
        super().__init__(span)
        self.context = context

    def end(self, error: str | None = None) -> None:
        if error is not None:
            self._span.set_attribute("error.type", error)
            self._span.set_status(trace.StatusCode.ERROR)
        self._span.end()


class OtelTracer:
    """Opens OpenTelemetry spans of ``provider`` under mailbus's trace contexts."""

    def __init__(self, provider: trace.TracerProvider) -> None:
        self._tracer = provider.get_tracer("mailbus")

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        parent: TraceContext | None = None,
        attributes: Attributes | None = None,
        kind: Kind = "internal",
    ) -> Iterator[Span]:
        parent = parent if parent is not None else current()
        span, context = self._open(name, parent, attributes, kind)
        with trace.use_span(span, end_on_exit=True), use(context):
            yield _OtelSpan(span)

    def start(
        self,
        name: str,
        parent: TraceContext | None,
        attributes: Attributes | None = None,
        kind: Kind = "producer",
    ) -> OpenSpan:
        return _OtelOpenSpan(*self._open(name, parent, attributes, kind))

    def _open(
        self, name: str, parent: TraceContext | None, attributes: Attributes | None, kind: Kind
    ) -> tuple[trace.Span, TraceContext]:
        span = self._tracer.start_span(
            name, context=_remote(parent), kind=_KINDS[kind], attributes=attributes
        )
        own = span.get_span_context()
        context = TraceContext(
            format(own.trace_id, "032x"),
            format(own.span_id, "016x"),
            int(own.trace_flags),
            parent.tracestate if parent is not None else None,
        )
        return span, context


def _remote(parent: TraceContext | None) -> Context | None:
    """OpenTelemetry's context holding ``parent`` as a remote span; None: a new trace."""
    if parent is None:
        return None
    state = TraceState.from_header([parent.tracestate]) if parent.tracestate else None
    span_context = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.parent_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(parent.flags),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def span_exporter(exporter: str) -> SpanExporter:
    """``otlp``: OTLP over HTTP, configured by the standard ``OTEL_EXPORTER_OTLP_*``
    variables; ``console``: one JSON document per span on stdout."""
    if exporter == "console":
        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(
            "MAILBUS_OTEL_EXPORTER",
            "otlp needs opentelemetry-exporter-otlp-proto-http: install mailbus[tracing]",
        ) from None
    return OTLPSpanExporter()


def exporting_tracer(exporter: str, service: str) -> Tracer:
    """A tracer whose spans go to ``exporter`` in batches (flushed at exit)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter(exporter)))
    return OtelTracer(provider)
