"""What tracing adds to one mail in the consumer, in microseconds (docs/benchmarks/tracing.md).

    flock /tmp/mailbus-heavy.lock python3 bench/tracing_overhead.py

The consumer's tracing work for one mail, with no I/O: reading the pointer's headers
(:func:`~mailbus.kernel.tracecontext.from_headers`) and the four spans of a delivery
(deliver holding claim, provider_call and settle), each with its attributes, under

- ``noop``: no exporter configured (the default), a pointer without trace headers;
- ``noop+context``: no exporter, a pointer with a ``traceparent`` (passed on unchanged);
- ``otel``: OpenTelemetry's SDK with a batch processor whose exporter drops the spans
  (what it costs the consumer's loop, the export itself runs on the SDK's thread).

Three runs of 20,000 mails each; min / median / max of the per-mail time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from mailbus.kernel.otel import OtelTracer
from mailbus.kernel.tracecontext import from_headers
from mailbus.kernel.tracing import NOOP, Attributes, Tracer

MAILS = 20_000
RUNS = 3
TRACED = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]


class _Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def one_mail(tracer: Tracer, headers: list[tuple[str, bytes]] | None) -> None:
    parent = from_headers(headers).context
    with tracer.span("mailbus.deliver", parent, {"mailbus.topic": "mailbus.send.p1"}):
        with tracer.span("mailbus.claim", attributes={"mailbus.send_id": 1}) as span:
            span.set("mailbus.claimed", True)
        call: Attributes = {"mailbus.send_id": 1, "mailbus.attempt": 1, "mailbus.provider": "x"}
        with tracer.span("mailbus.provider_call", attributes=call) as span:
            span.set("mailbus.status_code", 200)
        with tracer.span("mailbus.settle", attributes={"mailbus.status": "accepted"}):
            pass


def per_mail_us(tracer: Tracer, headers: list[tuple[str, bytes]] | None) -> float:
    started = time.perf_counter()
    for _ in range(MAILS):
        one_mail(tracer, headers)
    return (time.perf_counter() - started) / MAILS * 1e6


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Dropping(), max_queue_size=100_000))
    cases: list[tuple[str, Tracer, list[tuple[str, bytes]] | None]] = [
        ("noop", NOOP, None),
        ("noop+context", NOOP, TRACED),
        ("otel", OtelTracer(provider), TRACED),
    ]
    for name, tracer, headers in cases:
        runs = sorted(per_mail_us(tracer, headers) for _ in range(RUNS))
        print(
            f"{name:14} min {runs[0]:7.2f} us  median {statistics.median(runs):7.2f} us"
            f"  max {runs[-1]:7.2f} us per mail"
        )
    provider.shutdown()


if __name__ == "__main__":
    main()
