"""What one provider call means: docs/reference/contract.md#email-api as a pure function.

The HTTP adapter turns every response or httpx exception into a :data:`CallResult`;
:func:`classify` maps it to one of four :class:`Outcome` values:

==========================================  ========  ===================================
result                                      outcome   why
==========================================  ========  ===================================
2xx with ``{"id": "<non-empty>"}``          accepted  the contract
2xx without a valid id                      unknown   the contract: never a blind resend
408, 429, 500, 502, 503, 504                retry     the contract; Retry-After carried
a 4xx the provider's error body calls      retry     e.g. Resend's 409
transient (``transient``)                             concurrent_idempotent_requests
a reply about our account, sender          retry     the provider's state (a bad token,
identity or quota (``server_stage``:                  sending paused, an unverified From,
``account``, ``sender``, ``quota``)                   a daily quota): the breaker counts
                                                      it, no attempt is spent, a quota
                                                      waits MAILBUS_QUOTA_PAUSE
a rate limit outside HTTP 429             retry     like a 429: the process pauses,
(``rate_limited``, e.g. Postmark's 422              the breaker is not fed
ErrorCode 429)
any other 4xx                               rejected  the contract: failed + DLQ (a
                                                      dialect's definite "no such
                                                      recipient" also suppresses the
                                                      address: ``bad_recipient``)
any other 5xx (501, 505, 507, 511, ...)     retry     a server error, not a verdict on the
                                                      mail; retrying with the same
                                                      Idempotency-Key cannot duplicate
1xx, 3xx, or a code outside 100-599         unknown   the request was sent and the reply
                                                      says nothing about acceptance (a
                                                      303 after a POST even means it was
                                                      processed); the look-up settles it
transport failure, request not sent         retry     refused/reset/connect timeout
transport failure, request sent             unknown   read timeout, connection dropped
==========================================  ========  ===================================

Every ``reason`` is short, single-line and has bearer tokens masked, so it can be stored in
``last_error`` and shown in the DLQ.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

__all__ = [
    "ACCOUNT",
    "MAX_REASON_CHARS",
    "MAX_RETRY_AFTER_S",
    "QUOTA",
    "RETRYABLE_STATUS_CODES",
    "SENDER",
    "CallResult",
    "Classification",
    "Outcome",
    "ProviderReply",
    "TransportFailure",
    "classify",
    "clip_reason",
    "parse_retry_after",
]

# ``server_stage`` of an HTTP reply about our account at the provider, not the mail
# (docs/providers.md#account-sender-and-quota-replies): counted by kind in
# mailbus_provider_server_failures_total{provider, stage}
ACCOUNT = "account"  # a bad, revoked or missing key; a suspended or paused account
SENDER = "sender"  # the From address or domain is not a verified sender identity
QUOTA = "quota"  # a daily or monthly sending quota: waits MAILBUS_QUOTA_PAUSE

RETRYABLE_STATUS_CODES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 3600.0
MAX_REASON_CHARS = 200

_DELTA_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+\S+")


@dataclass(frozen=True)
class ProviderReply:
    """An HTTP response. ``message_id`` is None unless a 2xx body was ``{"id": "<str>"}``."""

    status_code: int
    message_id: str | None = None
    retry_after_s: float | None = None
    error_excerpt: str = ""
    domain_scoped: bool = False  # a 429 for the recipient's domain (X-Throttle-Scope)
    transient: bool = False  # the provider's error body says: the same request again, later
    rate_limited: bool = False  # a rate limit outside HTTP 429 (Postmark's ErrorCode 429)
    bad_recipient: bool = False  # a definite "this address does not exist / is invalid"
    # the reply is about our account at the provider (a bad token, sending paused), not
    # this mail: the provider's state, like an SMTP server stage (Classification.server_stage):
    # ACCOUNT, SENDER or QUOTA
    server_stage: str | None = None


@dataclass(frozen=True)
class TransportFailure:
    """No HTTP response. ``request_sent`` False: refused, reset or connect timeout before
    the request left; True: read timeout or connection lost after it was sent."""

    request_sent: bool
    detail: str = ""


CallResult = ProviderReply | TransportFailure


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    RETRY = "retry"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Classification:
    """The meaning of one call; ``retry_after_s`` is set only for a retry."""

    outcome: Outcome
    message_id: str | None = None
    retry_after_s: float | None = None
    reason: str = ""
    status_code: int | None = None
    provider_code: str | None = None  # stored as text: "503" (HTTP), "550 5.1.1" (SMTP)
    domain_scoped: bool = False  # the provider throttles only the recipient's domain
    # The provider's own state, not this mail's (SMTP: the connection, greeting, AUTH or
    # MAIL failed, at this stage): the call never reached the recipient, so it feeds the
    # breaker and spends none of the mail's attempts. None: the result is about the mail.
    server_stage: str | None = None
    # A rejection that says the address itself is bad (SMTP 5.1.1, a dialect's "invalid
    # recipient"): the address is suppressed as a hard bounce would suppress it.
    bad_recipient: bool = False
    # A rate limit (a 429, or a provider's own code for one): the process pauses for it and
    # the breaker does not count it -- the provider answered, it is healthy.
    throttled: bool = False
    # A retry the provider's error body asks for about this request (Resend's 409
    # concurrent_idempotent_requests): not a sign of an unhealthy provider either.
    transient: bool = False

    def __post_init__(self) -> None:
        if self.provider_code is None and self.status_code is not None:
            object.__setattr__(self, "provider_code", str(self.status_code))


def classify(result: CallResult) -> Classification:
    """Map one call result to its outcome, exactly per docs/reference/contract.md#email-api."""
    if isinstance(result, TransportFailure):
        if result.request_sent:
            return Classification(Outcome.UNKNOWN, reason=_with_detail("lost after send", result))
        return Classification(Outcome.RETRY, reason=_with_detail("not sent", result))
    code = result.status_code
    if 200 <= code <= 299:
        if result.message_id:
            return Classification(
                Outcome.ACCEPTED,
                message_id=result.message_id,
                reason=f"http {code}",
                status_code=code,
            )
        return Classification(
            Outcome.UNKNOWN, reason=f"http {code} without a valid id", status_code=code
        )
    if result.server_stage is not None:
        return Classification(
            Outcome.RETRY,
            retry_after_s=_sane_delay(result.retry_after_s),
            reason=clip_reason(f"provider account, {_with_excerpt(code, result.error_excerpt)}"),
            status_code=code,
            server_stage=result.server_stage,
        )
    transient = result.transient and 400 <= code <= 499
    if (
        code in RETRYABLE_STATUS_CODES
        or 500 <= code <= 599
        or transient
        or result.rate_limited
    ):
        return Classification(
            Outcome.RETRY,
            retry_after_s=_sane_delay(result.retry_after_s),
            reason=_with_excerpt(code, result.error_excerpt),
            status_code=code,
            domain_scoped=code == 429 and result.domain_scoped,
            throttled=code == 429 or result.rate_limited,
            transient=transient,
        )
    if 400 <= code <= 499:
        return Classification(
            Outcome.REJECTED,
            reason=_with_excerpt(code, result.error_excerpt),
            status_code=code,
            bad_recipient=result.bad_recipient,
        )
    return Classification(
        Outcome.UNKNOWN, reason=f"http {code} says nothing about acceptance", status_code=code
    )


def parse_retry_after(
    value: str | None, now: datetime, max_s: float = MAX_RETRY_AFTER_S
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, at most ``max_s``.

    Delta-seconds (``"120"``, also ``"1.5"``) or an HTTP-date; an HTTP-date in the past
    means 0.0. Missing, empty, negative or unparseable values give None (no minimum).
    A naive ``now`` or a date without a zone is taken as UTC.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        seconds = float(text)
    elif text[0] in "+-" or text[0].isdigit():
        return None  # a negative or malformed number, not a date
    else:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        seconds = max(0.0, (_aware(when) - _aware(now)).total_seconds())
    if math.isnan(seconds):
        return None
    return min(seconds, max_s)


def clip_reason(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """One line, control characters removed, bearer tokens masked, at most ``limit`` chars."""
    line = _BEARER.sub(r"\1 ***", _CONTROL.sub(" ", text)).strip()
    line = " ".join(line.split())
    if len(line) <= limit:
        return line
    return line[: max(limit - 1, 0)] + "…"


def _with_detail(what: str, failure: TransportFailure) -> str:
    head = f"transport error, {what}"
    return clip_reason(f"{head}: {failure.detail}" if failure.detail.strip() else head)


def _with_excerpt(code: int, excerpt: str) -> str:
    return clip_reason(f"http {code}: {excerpt}" if excerpt.strip() else f"http {code}")


def _sane_delay(seconds: float | None) -> float | None:
    if seconds is None or math.isnan(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
