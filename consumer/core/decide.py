"""Decisions as values: what to do with one send, given what just happened.

The delivery service loads a row as a :class:`SendView` and, for a claimable row:

1. ``needs_lookup(...)`` (an ``unknown`` row, or a ``sending`` row whose lease passed):
   look the dedupe key up at the provider and apply :func:`after_lookup`. Nothing is sent
   before the earlier call is resolved.
2. otherwise (a ``pending`` row) apply :func:`before_send`; if it returns None, claim the
   row (``pending → sending``), call the provider, count the call in ``attempts``, classify
   the result and apply :func:`after_call`.

Each function returns a :class:`Decision`; the service writes it with one guarded update
from the status the row is in, and publishes a dead letter when ``dead_letter`` is set.
Every ``next_status`` these functions produce is an allowed transition from the status
they are documented to start from (see ``states.TRANSITIONS``), with one exception that is
not a transition: :func:`after_lookup` on an ``unknown`` row whose look-up failed answers
``unknown`` again, i.e. keep the status and write only ``next_try_at`` and ``last_error``.
Times must be timezone-aware.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from consumer.core.backoff import RetryPolicy, retry_delay
from consumer.core.outcome import Classification, Outcome, clip_reason
from consumer.core.states import Status
from mailbus.errors import InvalidSendError
from schemas.send_request import validate_address

__all__ = [
    "Decision",
    "SendView",
    "after_call",
    "after_lookup",
    "before_send",
    "confirm_failure",
    "lease_expired",
    "needs_confirmation",
    "needs_lookup",
]

Rand = Callable[[], float]


@dataclass(frozen=True)
class SendView:
    """The columns of an ``email_sends`` row that decisions need."""

    id: int
    dedupe_key: str
    to_address: str
    template: str
    priority: str
    status: Status
    attempts: int
    expires_at: datetime | None = None
    next_try_at: datetime | None = None


@dataclass(frozen=True)
class Decision:
    """Move the row to ``next_status``; ``retry_at`` becomes ``next_try_at``, ``reason``
    becomes ``last_error``, ``message_id`` is stored with ``accepted``."""

    next_status: Status
    retry_at: datetime | None = None
    reason: str = ""
    message_id: str | None = None
    dead_letter: bool = False
    status_code: int | None = None


def before_send(row: SendView, now: datetime, suppressed: bool) -> Decision | None:
    """The gates before a call, for a ``pending`` row: expired, suppressed, or an address
    that must never reach the provider. None means: claim it and send.

    Raises ValueError for any other status: an ``unknown`` row may already have been
    accepted, so it is resolved with :func:`after_lookup`, never gated and resent.
    """
    if row.status != Status.PENDING:
        raise ValueError(f"before_send needs a pending row, got {row.status.value}")
    if row.expires_at is not None and row.expires_at <= now:
        return Decision(Status.EXPIRED, reason="expired before sending")
    if suppressed:
        return Decision(Status.SUPPRESSED, reason="address is suppressed")
    try:
        validate_address(row.to_address)
    except InvalidSendError as exc:
        reason = clip_reason(f"invalid {exc.field}: {exc.problem}")
        return Decision(Status.FAILED, reason=reason, dead_letter=True)
    return None


def after_call(
    row: SendView, result: Classification, now: datetime, policy: RetryPolicy, rand: Rand
) -> Decision:
    """The decision for a ``sending`` row after one provider call.

    ``row.attempts`` already counts this call. A retryable outcome goes back to ``pending``
    unless attempts are spent (``failed`` + DLQ) or the next try would fall at or after
    ``expires_at`` (``expired``). An unknown outcome stays ``unknown`` until resolved.
    """
    code = result.status_code
    if result.outcome is Outcome.ACCEPTED:
        return Decision(
            Status.ACCEPTED,
            reason=clip_reason(result.reason),
            message_id=result.message_id,
            status_code=code,
        )
    if result.outcome is Outcome.REJECTED:
        return Decision(
            Status.FAILED, reason=clip_reason(result.reason), dead_letter=True, status_code=code
        )
    if result.outcome is Outcome.UNKNOWN:
        retry_at = _retry_at(row, now, policy, rand, result.retry_after_s)
        return Decision(
            Status.UNKNOWN,
            retry_at=retry_at,
            reason=clip_reason(result.reason),
            status_code=code,
        )
    return _retry_or_stop(row, result.reason, now, policy, rand, result.retry_after_s, code)


def needs_confirmation(row: SendView, decision: Decision) -> bool:
    """Whether a ``failed`` decision must be checked against the provider first.

    An earlier attempt of this row may have been accepted without our knowing (a timeout
    resolved as "not found" while the provider was still working on it); a later 4xx or
    a run of 5xx then says nothing about that acceptance. So a row that was tried before
    is looked up before it is failed.
    """
    return decision.next_status is Status.FAILED and row.attempts > 1


def confirm_failure(decision: Decision, found_message_id: str | None) -> Decision:
    """The failed decision stands unless the look-up found an acceptance."""
    if found_message_id:
        return Decision(Status.ACCEPTED, reason="accepted per look-up", message_id=found_message_id)
    return decision


def after_lookup(
    row: SendView,
    found_message_id: str | None,
    lookup_failed: bool,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    *,
    detail: str = "",
) -> Decision:
    """The decision for an ``unknown`` (or lease-expired ``sending``) row after looking its
    dedupe key up at the provider.

    Found: ``accepted`` with that id. Not found (404): the earlier call was not accepted,
    so a retry with the same Idempotency-Key is safe: ``pending`` with a ``retry_at``,
    unless attempts are spent or the mail expires first. The look-up itself failed (or
    its reply was malformed, which the adapter reports as failed): stay ``unknown`` with a
    ``retry_at``; the row stays visible and is resolved on a later pass.
    """
    if found_message_id:
        return Decision(Status.ACCEPTED, reason="accepted per look-up", message_id=found_message_id)
    if lookup_failed:
        head = "look-up failed, outcome unknown"
        reason = clip_reason(f"{head}: {detail}" if detail.strip() else head)
        return Decision(Status.UNKNOWN, retry_at=_retry_at(row, now, policy, rand), reason=reason)
    return _retry_or_stop(row, "not accepted per look-up", now, policy, rand, None, None)


def lease_expired(row_status: Status, lease_until: datetime | None, now: datetime) -> bool:
    """Whether a row is ``sending`` with a lease that has passed (or no lease at all): its
    call's outcome is unknown, and it is resolved like an ``unknown`` row."""
    if row_status != Status.SENDING:
        return False
    return lease_until is None or lease_until <= now


def needs_lookup(row_status: Status, lease_until: datetime | None, now: datetime) -> bool:
    """Whether the row's last call must be resolved by a look-up before anything else."""
    return row_status == Status.UNKNOWN or lease_expired(row_status, lease_until, now)


def _retry_or_stop(
    row: SendView,
    reason: str,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    retry_after_s: float | None,
    status_code: int | None,
) -> Decision:
    if row.attempts >= policy.max_attempts:
        return Decision(
            Status.FAILED,
            reason=clip_reason(f"gave up after {row.attempts} attempts: {reason}"),
            dead_letter=True,
            status_code=status_code,
        )
    retry_at = _retry_at(row, now, policy, rand, retry_after_s)
    if row.expires_at is not None and retry_at >= row.expires_at:
        return Decision(
            Status.EXPIRED,
            reason=clip_reason(f"expires before the next try: {reason}"),
            status_code=status_code,
        )
    return Decision(
        Status.PENDING, retry_at=retry_at, reason=clip_reason(reason), status_code=status_code
    )


def _retry_at(
    row: SendView,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    retry_after_s: float | None = None,
) -> datetime:
    delay = retry_delay(max(row.attempts, 1), policy, rand, retry_after_s)
    return now + timedelta(seconds=delay)
