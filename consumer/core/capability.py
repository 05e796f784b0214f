"""What a provider offers against doubt, and what an unknown outcome then means: pure values.

A call whose outcome is unknown (a read timeout after the request left, a malformed 2xx)
may have been accepted. What mailbus may do next follows from the provider's
:class:`Capability`, never from its name (docs/architecture.md#providers-as-adapters):

=====================================  ==============================  ===============
the provider offers                    an unknown outcome is resolved  guarantee
=====================================  ==============================  ===============
a look-up by something mailbus chose   by looking it up                exactly once
an idempotency key (no look-up)        by a resend under the same key, exactly once
                                       inside the key's window from
                                       the first attempt; past it the
                                       row stays ``unknown``
neither                                ``unknown``, for an operator    at most once
neither, with MAILBUS_UNKNOWN_OUTCOME  by a resend (a duplicate is     at least once
=at_least_once                         possible)
=====================================  ==============================  ===============

A 5xx is a definite "not accepted" only where a retry cannot make a second mail (a key or
a look-up). With neither, a 500, 502, 504 (or any 5xx but 503) may come after the provider
took the mail -- a gateway's 504 is a lost reply -- so :func:`without_cover` makes it
unknown; 503 (the service refused the request) and 429 (throttled before processing) stay
retries.

A provider with both (the sandbox's own dialect) is looked up: a definite answer without a
second call. The window counts from the row's first call (``first_tried_at``, on the
database's clock), and a resend must *reach* the provider before it ends, so the last
``reach_s`` seconds of it are not used.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from mailbus.consumer.core.outcome import Classification, Outcome, clip_reason

__all__ = [
    "Capability",
    "Guarantee",
    "IdempotencyKey",
    "Resolution",
    "guarantee_of",
    "may_resend",
    "resend_window_s",
    "resolve_unknown",
    "without_cover",
]

_REFUSED_BEFORE_PROCESSING = frozenset({429, 503})


class Guarantee(StrEnum):
    """``email_sends.guarantee``: what a row was sent under."""

    EXACTLY_ONCE = "exactly_once"
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"


class Resolution(StrEnum):
    """What to do about a call with no known outcome."""

    LOOK_UP = "look_up"  # ask the provider
    RESEND = "resend"  # send again (under the same key, when there is one)
    WAIT = "wait"  # stay unknown until an operator resolves it


@dataclass(frozen=True)
class IdempotencyKey:
    """The provider deduplicates sends carrying the same ``field`` (a header or body field)
    for ``window_s`` seconds from the first; None: for as long as it keeps the mail."""

    field: str
    window_s: float | None

    def __post_init__(self) -> None:
        if self.window_s is not None and not self.window_s > 0:
            raise ValueError("an idempotency window must be > 0 seconds")


@dataclass(frozen=True)
class Capability:
    """What one provider offers against doubt, with the documentation it comes from."""

    key: IdempotencyKey | None = None
    look_up: bool = False  # a look-up of a sent mail by something mailbus chose
    source: str = field(default="", compare=False)  # the documentation it was taken from


def guarantee_of(capability: Capability, at_least_once: bool) -> Guarantee:
    """The guarantee a row sent to this provider is sent under (``at_least_once``:
    MAILBUS_UNKNOWN_OUTCOME, which matters only to a provider with neither key nor look-up)."""
    if capability.key is not None or capability.look_up:
        return Guarantee.EXACTLY_ONCE
    return Guarantee.AT_LEAST_ONCE if at_least_once else Guarantee.AT_MOST_ONCE


def resend_window_s(capability: Capability, at_least_once: bool, reach_s: float) -> float | None:
    """Seconds after a row's first call within which a row in doubt may still be sent again;
    None: at any time (its doubt is settled by a look-up, its key never expires, or at
    least once was asked for). The claim checks the same number on the database's clock."""
    if capability.look_up:
        return None
    key = capability.key
    if key is not None:
        return None if key.window_s is None else max(key.window_s - reach_s, 0.0)
    return None if at_least_once else 0.0


def may_resend(
    capability: Capability,
    in_doubt: bool,
    first_tried_at: datetime | None,
    now: datetime,
    at_least_once: bool,
    reach_s: float,
) -> bool:
    """Whether a row may be sent (again) now: always, unless a call of it had no known
    outcome; then only inside :func:`resend_window_s` of its first call. A row in doubt
    with no recorded first call is taken as past any window."""
    if not in_doubt:
        return True
    window_s = resend_window_s(capability, at_least_once, reach_s)
    if window_s is None:
        return True
    return first_tried_at is not None and now < first_tried_at + timedelta(seconds=window_s)


def resolve_unknown(
    capability: Capability,
    first_tried_at: datetime | None,
    now: datetime,
    at_least_once: bool,
    reach_s: float,
) -> Resolution:
    """What to do right after a call (or lease) ended with no known outcome."""
    if capability.look_up:
        return Resolution.LOOK_UP
    if may_resend(capability, True, first_tried_at, now, at_least_once, reach_s):
        return Resolution.RESEND
    return Resolution.WAIT


def without_cover(capability: Capability, result: Classification) -> Classification:
    """``result``, unless it is a retry on a server error that may have followed acceptance
    at a provider with neither key nor look-up: then ``unknown`` (docs/providers.md)."""
    if (
        capability.key is not None
        or capability.look_up
        or result.outcome is not Outcome.RETRY
        or result.status_code is None
        or not 500 <= result.status_code <= 599
        or result.status_code in _REFUSED_BEFORE_PROCESSING
    ):
        return result
    reason = clip_reason(f"{result.reason} (may have been accepted: no key or look-up)")
    return replace(result, outcome=Outcome.UNKNOWN, retry_after_s=None, reason=reason)
