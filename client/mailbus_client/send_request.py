"""What a valid send request is: the checks shared by the enqueue helper and the consumer.

Pure functions over values; each raises :class:`InvalidSendError` naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mailbus_client.errors import InvalidSendError

__all__ = [
    "MAX_ADDRESS_LENGTH",
    "MAX_DEDUPE_KEY_LENGTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_TRACESTATE_LENGTH",
    "PRIORITIES",
    "SendRequest",
    "is_template_name",
    "mail_headers",
    "reject_line_breaks",
    "validate_address",
    "validate_send_request",
]

PRIORITIES = ("p0", "p1", "p2")
MAX_ADDRESS_LENGTH = 254  # RFC 5321 path limit
MAX_DEDUPE_KEY_LENGTH = 200
MAX_TEMPLATE_LENGTH = 100
MAX_PAYLOAD_BYTES = 256 * 1024

# One recipient, no display name: local@domain with a dotted domain. Deliberately narrower
# than RFC 5322 (no quoted local parts, no comments), which is what email APIs accept.
_ADDRESS = re.compile(
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}"
    r"@(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$"
)
_TEMPLATE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_DEDUPE_KEY = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces: it becomes a header
# W3C Trace Context: version-traceid-parentid-flags; a later version may append fields
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]*)?")
MAX_TRACESTATE_LENGTH = 512  # W3C Trace Context: a tracestate of at most 512 characters


@dataclass(frozen=True)
class SendRequest:
    """One mail to one recipient, as a domain service asks for it."""

    dedupe_key: str
    to_address: str
    template: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    priority: str = "p1"
    expires_at: datetime | None = None
    # not before: an instant, or a delay counted on the database clock; None: at once
    send_at: datetime | timedelta | None = None
    # W3C trace context; None: the current OpenTelemetry span's, if any (trace_context.py)
    traceparent: str | None = None
    tracestate: str | None = None


def validate_address(address: object) -> str:
    """Return ``address`` if it is one plain mailbox, else raise."""
    if not isinstance(address, str) or not address:
        raise InvalidSendError("to_address", "must be a non-empty string")
    reject_line_breaks("to_address", address)
    if len(address) > MAX_ADDRESS_LENGTH or not _ADDRESS.match(address):
        raise InvalidSendError("to_address", "is not a valid email address")
    return address


def is_template_name(value: str) -> bool:
    """Whether ``value`` is a template name a send request may carry."""
    return len(value) <= MAX_TEMPLATE_LENGTH and _TEMPLATE.match(value) is not None


def validate_send_request(request: SendRequest) -> bytes:
    """Check every field; return the payload serialised as JSON (it is checked by size)."""
    if not isinstance(request.dedupe_key, str) or not _DEDUPE_KEY.match(request.dedupe_key):
        raise InvalidSendError("dedupe_key", "must be printable ASCII without spaces")
    if len(request.dedupe_key) > MAX_DEDUPE_KEY_LENGTH:
        raise InvalidSendError("dedupe_key", f"longer than {MAX_DEDUPE_KEY_LENGTH} characters")
    validate_address(request.to_address)
    if not isinstance(request.template, str) or not _TEMPLATE.match(request.template):
        raise InvalidSendError("template", "must match [a-z0-9][a-z0-9_.-]*")
    if not is_template_name(request.template):
        raise InvalidSendError("template", f"longer than {MAX_TEMPLATE_LENGTH} characters")
    if request.priority not in PRIORITIES:
        raise InvalidSendError("priority", f"must be one of {', '.join(PRIORITIES)}")
    if not isinstance(request.payload, Mapping):
        raise InvalidSendError("payload", "must be a mapping of template variables")
    for name in ("subject", "from", "reply_to", "cc", "bcc"):
        value = request.payload.get(name)
        if isinstance(value, str):
            reject_line_breaks(f"payload.{name}", value)
    try:
        encoded = json.dumps(request.payload, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidSendError("payload", f"is not JSON-serialisable: {exc}") from None
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise InvalidSendError("payload", f"larger than {MAX_PAYLOAD_BYTES} bytes")
    if request.expires_at is not None and request.expires_at.tzinfo is None:
        raise InvalidSendError("expires_at", "must be timezone-aware")
    _validate_schedule(request)
    _validate_trace_context(request)
    return encoded


def _validate_schedule(request: SendRequest) -> None:
    send_at = request.send_at
    if send_at is None:
        return
    if isinstance(send_at, timedelta):
        if send_at < timedelta(0):
            raise InvalidSendError("send_at", "a delay must not be negative")
        return
    if not isinstance(send_at, datetime) or send_at.tzinfo is None:
        raise InvalidSendError("send_at", "must be a timezone-aware datetime or a timedelta")


def _validate_trace_context(request: SendRequest) -> None:
    if request.traceparent is not None and (
        not isinstance(request.traceparent, str) or not _TRACEPARENT.fullmatch(request.traceparent)
    ):
        raise InvalidSendError("traceparent", "is not a W3C traceparent (00-<32>-<16>-<2 hex>)")
    if request.tracestate is not None:
        if not isinstance(request.tracestate, str):
            raise InvalidSendError("tracestate", "must be a string")
        reject_line_breaks("tracestate", request.tracestate)
        if len(request.tracestate) > MAX_TRACESTATE_LENGTH:
            raise InvalidSendError("tracestate", f"longer than {MAX_TRACESTATE_LENGTH} characters")


def reject_line_breaks(field_name: str, value: str) -> None:
    """Raise if ``value`` holds CR, LF or NUL (a header injection), naming ``field_name``."""
    if "\r" in value or "\n" in value or "\x00" in value:
        raise InvalidSendError(field_name, "contains CR, LF or NUL (header injection)")


_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,75}")


def mail_headers(headers: object) -> dict[str, str]:
    """The ``headers`` variable as mail headers to pass on (e.g. a campaign's
    List-Unsubscribe): an object of header names to string values, none with CR, LF or
    NUL (a header injection), else InvalidSendError naming payload_json. Every provider
    adapter carries them the same way."""
    if not isinstance(headers, Mapping):
        raise InvalidSendError("payload_json", "variable headers must be an object")
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidSendError("payload_json", f"header name {name[:80]!r} is not valid")
        if not isinstance(value, str) or any(ch in value for ch in "\r\n\0"):
            raise InvalidSendError(
                "payload_json", f"header {name} must be a string without CR, LF or NUL"
            )
    return dict(headers)
