"""The tracer a process runs with: :data:`~mailbus.kernel.tracing.NOOP` unless an exporter
is configured (``MAILBUS_OTEL_EXPORTER`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``,
docs/guides/tracing.md); OpenTelemetry is imported only then."""

from __future__ import annotations

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.tracing import NOOP, Tracer

__all__ = ["configured_tracer"]


def configured_tracer(exporter: str | None, service: str) -> Tracer:
    """Spans of ``service`` (``mailbus-relay``, ``mailbus-consumer``...) to ``exporter``."""
    if exporter is None:
        return NOOP
    try:
        from mailbus.kernel import otel  # the extra mailbus[tracing]
    except ImportError:
        raise ConfigError(
            "MAILBUS_OTEL_EXPORTER", "needs OpenTelemetry: install mailbus with the extra [tracing]"
        ) from None
    return otel.exporting_tracer(exporter, service)
