"""The tracer a process runs with: :data:`~mailbus.kernel.tracing.NOOP` unless an exporter
is configured (``MAILBUS_OTEL_EXPORTER`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``,
docs/guides/tracing.md); OpenTelemetry is imported only then."""

from __future__ import annotations

from mailbus.kernel.extras import extra
from mailbus.kernel.tracing import NOOP, Tracer

__all__ = ["configured_tracer"]


def configured_tracer(exporter: str | None, service: str) -> Tracer:
    """Spans of ``service`` (``mailbus-relay``, ``mailbus-consumer``...) to ``exporter``."""
    if exporter is None:
        return NOOP
    with extra("tracing"):
        from mailbus.kernel import otel
    return otel.exporting_tracer(exporter, service)
