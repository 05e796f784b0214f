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

A 5xx is a definite "not accepted" only where a retry cannot make a second mail: a key
that never expires. Elsewhere a 500, 502, 504 (or any 5xx but 503) may come after the
provider took the mail -- a gateway's 504 is a lost reply; Postmark: "In most cases the
message is lost", https://postmarkapp.com/developer/api/overview#response-codes -- so
:func:`without_cover` makes it unknown: looked up where the provider can be, held to the
key's window where the key expires (a 409 asking to retry a key still in progress too), an
operator's otherwise. 503 (the service refused the request) and 429 (throttled before
processing) stay retries.

A look-up's "not found" counts only once :func:`lookup_settle_s` has passed since the call
in doubt began (docs/reference/contract.md, named providers): a provider's search may show
a mail some time after accepting it, or accept a timed-out call late. Where the provider
documents no delay, :data:`DEFAULT_LOOKUP_SETTLE_S`; MAILBUS_LOOKUP_SETTLE overrides.

A provider with both (the sandbox's own dialect) is looked up: a definite answer without a
second call. The window counts from the row's first call (``first_tried_at``, on the
database's clock), and a resend must *reach* the provider before it ends, so the last
``reach_s`` seconds of it are not used: a margin (MAILBUS_KEY_WINDOW_MARGIN) covering the
wait for an in-flight slot, the connect and request timeouts and the skew between our
clock and the provider's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from mailbus.consumer.core.outcome import Classification, Outcome, clip_reason

__all__ = [
    "DEFAULT_LOOKUP_SETTLE_S",
    "Capability",
    "Guarantee",
    "IdempotencyKey",
    "Resolution",
    "guarantee_of",
    "key_conflict",
    "lookup_settle_s",
    "may_resend",
    "resend_window_s",
    "resolve_unknown",
    "without_cover",
]

_REFUSED_BEFORE_PROCESSING = frozenset({429, 503})

DEFAULT_LOOKUP_SETTLE_S = 300.0
"""How long a look-up's "not found" is not believed, where the provider documents no delay
for its search (Postmark documents none): five minutes, far beyond any request timeout, so
a call the provider was still working on, or a search index behind the send, is found."""


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
    # seconds after a call in doubt began before a look-up's "not found" counts; None: the
    # provider documents none (DEFAULT_LOOKUP_SETTLE_S)
    settle_s: float | None = None

    def __post_init__(self) -> None:
        if self.settle_s is not None and not self.settle_s >= 0:
            raise ValueError("a look-up's settle time must be >= 0 seconds")


def guarantee_of(capability: Capability, at_least_once: bool) -> Guarantee:
    """The guarantee a row sent to this provider is sent under (``at_least_once``:
    MAILBUS_UNKNOWN_OUTCOME, which matters only to a provider with neither key nor look-up)."""
    if capability.key is not None or capability.look_up:
        return Guarantee.EXACTLY_ONCE
    return Guarantee.AT_LEAST_ONCE if at_least_once else Guarantee.AT_MOST_ONCE


def lookup_settle_s(capability: Capability, override: float | None = None) -> float:
    """Seconds after a call in doubt began before this provider's "not found" counts:
    ``override`` (MAILBUS_LOOKUP_SETTLE), else the provider's documented value, else
    :data:`DEFAULT_LOOKUP_SETTLE_S`; 0 for a provider without a look-up."""
    if not capability.look_up:
        return 0.0
    if override is not None:
        return override
    return DEFAULT_LOOKUP_SETTLE_S if capability.settle_s is None else capability.settle_s


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
    """``result``, unless it is a retry that may follow acceptance at a provider whose key
    does not cover a resend for good: then ``unknown`` (docs/providers.md). That is a 5xx
    other than 503 at a provider without a key (looked up first, or left to an operator)
    or with a key that expires (held to its window), and a 409 the provider asks to retry
    (Resend's ``concurrent_idempotent_requests``: the key is in use)."""
    key = capability.key
    if (key is not None and key.window_s is None) or result.outcome is not Outcome.RETRY:
        return result
    code = result.status_code
    server_error = code is not None and 500 <= code <= 599
    key_in_progress = key is not None and code == 409
    if result.server_stage is not None or code in _REFUSED_BEFORE_PROCESSING:
        return result
    if not (server_error or key_in_progress):
        return result
    cover = "a key that expires" if key is not None else "no key"
    reason = clip_reason(f"{result.reason} (may have been accepted: {cover})")
    return replace(result, outcome=Outcome.UNKNOWN, retry_after_s=None, reason=reason)


def key_conflict(capability: Capability, result: Classification) -> bool:
    """Whether ``result`` says the provider already holds this mail's idempotency key from
    another request (Resend: 409 ``invalid_idempotent_request``, "Retrying this request is
    useless", https://resend.com/docs/dashboard/emails/idempotency-keys): a 409 rejection
    under a key. For a row in doubt it means an earlier call reached the provider."""
    return (
        capability.key is not None
        and result.outcome is Outcome.REJECTED
        and result.status_code == 409
    )
