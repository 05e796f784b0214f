"""W3C trace context (https://www.w3.org/TR/trace-context/) as values: parse, validate, format.

One mail is one trace (docs/guides/tracing.md): a ``traceparent`` (and an optional
``tracestate``) travels from the enqueuing transaction (``email_sends.traceparent``, or an
OrderPlaced event's headers) through the send pointer's Kafka headers to the provider
call. This module is the pure part, standard library only, so the propagation costs
nothing and is always tested, whether OpenTelemetry is installed or not.

A malformed ``traceparent`` never fails a mail: :func:`parse` says it was there and
invalid (``Carried.malformed``, which the adapters count), and the mail goes on without a
trace. A ``tracestate`` that is not printable ASCII of at most 512 characters is dropped
(the spec lets a vendor discard it), and so is any ``tracestate`` without a valid
``traceparent``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "Carried",
    "TraceContext",
    "from_headers",
    "parse",
]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_MAX_TRACESTATE = 512  # the spec's limit for what a vendor must propagate
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class TraceContext:
    """A valid ``traceparent`` (version 00 fields) and its ``tracestate``."""

    trace_id: str  # 32 lowercase hex digits, not all zero
    parent_id: str  # 16 lowercase hex digits, not all zero: the caller's span
    flags: int  # 0..255; bit 0 is "sampled"
    tracestate: str | None = None

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags:02x}"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def headers(self) -> tuple[tuple[str, bytes], ...]:
        """As Kafka (or HTTP) headers: ``traceparent``, and ``tracestate`` if any."""
        found = [(TRACEPARENT, self.traceparent.encode())]
        if self.tracestate:
            found.append((TRACESTATE, self.tracestate.encode()))
        return tuple(found)


@dataclass(frozen=True)
class Carried:
    """What a carrier (a row, a set of headers) held: a context, or none; ``malformed``
    when a ``traceparent`` was there and invalid (ignored, and counted by the caller)."""

    context: TraceContext | None
    malformed: bool = False


_NONE = Carried(None)


def parse(traceparent: str | None, tracestate: str | None = None) -> Carried:
    """The context of a ``traceparent`` header value (and its ``tracestate``)."""
    if traceparent is None:
        return _NONE
    fields = _fields(traceparent.strip(" \t"))
    if fields is None:
        return Carried(None, malformed=True)
    trace_id, parent_id, flags = fields
    return Carried(TraceContext(trace_id, parent_id, flags, _tracestate(tracestate)))


Header = bytes | str | None


def from_headers(
    headers: Iterable[tuple[str, Header]] | Mapping[str, Header] | None,
) -> Carried:
    """The context carried by message headers (names compared case-insensitively; the
    first of a name counts); values that are not ASCII are malformed."""
    if not headers:
        return _NONE
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    values: dict[str, str | None] = {}
    for name, value in pairs:
        key = name.lower()
        if key in (TRACEPARENT, TRACESTATE) and key not in values:
            values[key] = _text(value)
    if TRACEPARENT not in values:
        return _NONE
    traceparent = values[TRACEPARENT]
    if traceparent is None:
        return Carried(None, malformed=True)
    return parse(traceparent, values.get(TRACESTATE))


def _fields(value: str) -> tuple[str, str, int] | None:
    """(trace id, parent id, flags) of a valid ``traceparent``, else None. A version other
    than 00 (and not ff) is read by its first four fields, as the spec asks."""
    if len(value) < 55:
        return None
    version = value[:2]
    if not _is_hex(version) or version == "ff":
        return None
    if version == "00" and len(value) != 55:
        return None
    if len(value) > 55 and value[55] != "-":
        return None
    if value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    trace_id, parent_id, flags = value[3:35], value[36:52], value[53:55]
    if not (_is_hex(trace_id) and _is_hex(parent_id) and _is_hex(flags)):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id, parent_id, int(flags, 16)


def _tracestate(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip(" \t")
    if not value or len(value) > _MAX_TRACESTATE:
        return None
    if not all(" " <= ch <= "~" for ch in value):
        return None
    return value


def _text(value: Header) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return value.decode("ascii")
    except UnicodeDecodeError:
        return None


def _is_hex(text: str) -> bool:
    return bool(text) and all(ch in _HEX for ch in text)
