"""Spans around one mail's delivery, exported only when configured (docs/guides/tracing.md).

A :class:`Tracer` opens a span under a parent :class:`~mailbus.kernel.tracecontext.TraceContext`
(or under the span open in this task), and makes the span's own context *current*: the
HTTP provider adapter reads :func:`current` and sends it as the ``traceparent`` header, so
the provider's side of the call joins the mail's trace.

Without ``MAILBUS_OTEL_EXPORTER`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) the tracer is
:data:`NOOP`: no OpenTelemetry import, no span, no cost beyond a context variable set
for a mail that carries a context, which it passes on unchanged (the provider then sees
the enqueuer's ``traceparent``). With it, the process loads the OpenTelemetry adapter
(:mod:`mailbus.kernel.otel`, the extra ``mailbus[tracing]``; the consumer's runner does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Literal, Protocol

from mailbus.kernel.tracecontext import TraceContext

__all__ = ["NOOP", "Attributes", "Kind", "OpenSpan", "Span", "Tracer", "current", "use"]

Attributes = Mapping[str, str | int | float | bool]
# OpenTelemetry's span kinds: a Kafka producer's ``send``, a consumer's ``process``...
Kind = Literal["internal", "producer", "consumer", "client", "server"]
_CURRENT: ContextVar[TraceContext | None] = ContextVar("mailbus_trace_context", default=None)


def current() -> TraceContext | None:
    """The context of the span open in this task (or the one a no-op span carries)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use(context: TraceContext) -> Iterator[None]:
    """Make ``context`` current for the block."""
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class Span(Protocol):
    def set(self, key: str, value: str | int | float | bool) -> None:
        """Add an attribute (e.g. the outcome, known only at the end)."""


class OpenSpan(Span, Protocol):
    """A span started and ended apart (one relay batch holds a span per message)."""

    @property
    def context(self) -> TraceContext | None:
        """What the message carries on: this span's context (the no-op's: its parent)."""

    def end(self, error: str | None = None) -> None:
        """End it; ``error``: the class of error it ended with (``error.type``)."""


class Tracer(Protocol):
    def span(
        self,
        name: str,
        parent: TraceContext | None = None,
        attributes: Attributes | None = None,
        kind: Kind = "internal",
    ) -> contextlib.AbstractContextManager[Span]:
        """A span named ``name`` under ``parent`` (default: the current context), current
        in the block."""

    def start(
        self,
        name: str,
        parent: TraceContext | None,
        attributes: Attributes | None = None,
        kind: Kind = "producer",
    ) -> OpenSpan:
        """A span under ``parent`` that ends when :meth:`OpenSpan.end` is called; never
        current."""


class _NoopSpan:
    def set(self, key: str, value: str | int | float | bool) -> None:
        pass


class _NoopOpenSpan(_NoopSpan):
    def __init__(self, parent: TraceContext | None) -> None:
        self.context = parent

    def end(self, error: str | None = None) -> None:
        pass


class _NoopTracer:
    """Records nothing; a parent passed in becomes current, for the provider's header,
    and is what a started span carries on."""

    _span = _NoopSpan()

    def span(
        self,
        name: str,
        parent: TraceContext | None = None,
        attributes: Attributes | None = None,
        kind: Kind = "internal",
    ) -> contextlib.AbstractContextManager[Span]:
        if parent is None:
            return contextlib.nullcontext(self._span)
        return self._carrying(parent)

    def start(
        self,
        name: str,
        parent: TraceContext | None,
        attributes: Attributes | None = None,
        kind: Kind = "producer",
    ) -> OpenSpan:
        return _NoopOpenSpan(parent)

    @contextlib.contextmanager
    def _carrying(self, parent: TraceContext) -> Iterator[Span]:
        with use(parent):
            yield self._span


NOOP: Tracer = _NoopTracer()
