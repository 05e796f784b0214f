"""Decisions as values: what to do with one send, given what just happened.

The delivery service loads a row as a :class:`SendView` and, for a claimable row:

1. ``needs_lookup(...)`` (an ``unknown`` row, or a ``sending`` row whose lease passed):
   look the dedupe key up at the provider and apply :func:`after_lookup`. Nothing is sent
   before the earlier call is resolved.
2. otherwise (a ``pending`` row) apply :func:`before_send`; if it returns None, claim the
   row (``pending → sending``), call the provider, count the call in ``attempts``, classify
   the result and apply :func:`after_call`.

**Doubt is resolved by look-up.** A row the provider has seen may have been accepted
without our knowing. So whenever :func:`needs_confirmation` says so (a final state other
than ``accepted`` for a row tried before), the service looks the key up at the provider
that took the calls and applies :func:`confirm_final`: found → ``accepted``; look-up failed
→ ``unknown``; not found → the final state, but only once ``late_accept_s`` (and the
look-up's settle time) has passed since the last call whose outcome was never known
(``in_doubt_since``): a provider still working on a timed-out call says 404 now and
accepts a moment later.

**A "not found" is believed only once it has settled.** A provider's search may show a
mail only some time after accepting it (Postmark documents no delay for its search). So
:func:`after_lookup` takes ``settle_s`` (capability.lookup_settle_s): before
``in_doubt_since + settle_s`` a "not found" leaves the row ``unknown``, looked up again
(more rarely the longer it has been in doubt, and once more when the time is up), never
resent.

Each function returns a :class:`Decision`; the service writes it with one guarded update
from the status the row is in, and publishes a dead letter when ``dead_letter`` is set.
Every ``next_status`` these functions produce is an allowed transition from the status
they are documented to start from (see ``states.TRANSITIONS``), with two stays that are
not transitions: an ``unknown`` row whose look-up failed stays ``unknown`` (only
``next_try_at`` and ``last_error`` change), and :func:`wait_for_provider` keeps a
``pending`` row pending for later. Times must be timezone-aware and come from the
database's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mailbus.consumer.core.backoff import RetryPolicy, quota_wait, retry_delay
from mailbus.consumer.core.outcome import QUOTA, Classification, Outcome, clip_reason
from mailbus.consumer.core.states import Status
from mailbus_client.errors import InvalidSendError
from mailbus_client.send_request import validate_address

__all__ = [
    "MAX_AGE_REASON",
    "SEND_HEADROOM_S",
    "Decision",
    "SendView",
    "after_call",
    "after_lookup",
    "before_send",
    "confirm_final",
    "doubt_without_lookup",
    "key_in_use",
    "lease_expired",
    "needs_confirmation",
    "needs_lookup",
    "resend_closed",
    "server_failed",
    "too_old",
    "tried",
    "unsendable",
    "wait_for_provider",
]

Rand = Callable[[], float]

SEND_HEADROOM_S = 0.05
"""A call starts at least this long before the mail's ``expires_at``: a request takes time
to reach the provider, and one that could arrive after the expiry is not made. A mail with
less left is ``expired`` (the claim refuses it too, consumer/queries.sql)."""


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
    in_doubt_since: datetime | None = None  # start of the latest call with no known outcome
    created_at: datetime | None = None
    first_tried_at: datetime | None = None  # start of the first call (a key's window)
    # the key the provider sees (mailbus/kernel/provider_key.py), set by the ledger;
    # None: the dedupe key itself (no prefix, the key's first life)
    provider_key: str | None = None

    @property
    def key(self) -> str:
        """The key this row is sent and looked up under at its provider."""
        return self.dedupe_key if self.provider_key is None else self.provider_key


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
    provider_code: str | None = None  # email_sends/email_attempts.provider_code
    # The call never reached the mail (the provider's server failed first): the attempt it
    # was claimed for is handed back, and no attempt history row is written.
    uncounted: bool = False
    # Set on a ``failed`` whose call said the address itself is bad: the settle statement
    # adds the address to email_suppressions (reason hard_bounce) with this as its source.
    suppress_source: str | None = None

    def __post_init__(self) -> None:
        if self.provider_code is None and self.status_code is not None:
            object.__setattr__(self, "provider_code", str(self.status_code))


def before_send(
    row: SendView, now: datetime, suppressed: bool, max_age_s: float | None = None
) -> Decision | None:
    """The gates before a call, for a ``pending`` row: expired, suppressed, too old for
    another retry (``max_age_s``, rows tried before only), or an address that must never
    reach the provider. None means: claim it and send. For a row tried before, a verdict
    stands only through :func:`confirm_final`.

    Raises ValueError for any other status: an ``unknown`` row may already have been
    accepted, so it is resolved with :func:`after_lookup`, never gated and resent.
    """
    if row.status != Status.PENDING:
        raise ValueError(f"before_send needs a pending row, got {row.status.value}")
    if row.expires_at is not None and row.expires_at <= now + timedelta(seconds=SEND_HEADROOM_S):
        return Decision(Status.EXPIRED, reason="expired before sending")
    if tried(row) and too_old(row, now, max_age_s):
        return _max_age(row, "no retry past the maximum age")
    if suppressed:
        return Decision(Status.SUPPRESSED, reason="address is suppressed")
    try:
        validate_address(row.to_address)
    except InvalidSendError as exc:
        return unsendable(exc.field, exc.problem)
    return None


MAX_AGE_REASON = "max age reached"  # the start of last_error; dead letter reason max_age


def tried(row: SendView) -> bool:
    """Whether the row's next call is a retry: a call of it was counted, or it was claimed
    before (``first_tried_at``) and its calls were handed back (:func:`server_failed`: our
    account, sender or quota refused them). MAILBUS_MAX_AGE ends only retries."""
    return row.attempts > 0 or row.first_tried_at is not None


def too_old(row: SendView, moment: datetime, max_age_s: float | None) -> bool:
    """Whether ``moment`` is at or past the row's ``created_at`` plus ``max_age_s``
    (MAILBUS_MAX_AGE; None: no maximum age)."""
    if max_age_s is None or row.created_at is None:
        return False
    return moment >= row.created_at + timedelta(seconds=max_age_s)


def _max_age(row: SendView, reason: str, status_code: int | None = None) -> Decision:
    return Decision(
        Status.FAILED,
        reason=clip_reason(f"{MAX_AGE_REASON} after {row.attempts} attempts: {reason}"),
        dead_letter=True,
        status_code=status_code,
    )


def unsendable(field: str, problem: str) -> Decision:
    """A mail that cannot travel as it is (``field`` is what is wrong): failed at once, with
    a dead letter naming the field; never claimed, so no offset is committed over a row
    left ``sending``."""
    return Decision(
        Status.FAILED, reason=clip_reason(f"invalid {field}: {problem}"), dead_letter=True
    )


def after_call(
    row: SendView,
    result: Classification,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    source: str = "sync",
) -> Decision:
    """The decision for a ``sending`` row after one provider call.

    ``row.attempts`` already counts this call. A retryable outcome goes back to ``pending``
    unless attempts are spent (``failed`` + DLQ) or the next try would fall at or after
    ``expires_at`` (``expired``). An unknown outcome stays ``unknown`` until resolved. A
    failure of the provider's server (``server_stage``) is :func:`server_failed`. A
    rejection of a bad address (``bad_recipient``) also suppresses it, under ``source``
    (``sync:<provider>``).
    """
    if result.server_stage is not None:
        return server_failed(row, result, now, policy, rand)
    code = result.status_code
    if result.outcome is Outcome.ACCEPTED:
        return Decision(
            Status.ACCEPTED,
            reason=clip_reason(result.reason),
            message_id=result.message_id,
            status_code=code,
            provider_code=result.provider_code,
        )
    if result.outcome is Outcome.REJECTED:
        return Decision(
            Status.FAILED,
            reason=clip_reason(result.reason),
            dead_letter=True,
            status_code=code,
            provider_code=result.provider_code,
            suppress_source=source if result.bad_recipient else None,
        )
    if result.outcome is Outcome.UNKNOWN:
        retry_at = _retry_at(row, now, policy, rand, result.retry_after_s)
        return Decision(
            Status.UNKNOWN,
            retry_at=retry_at,
            reason=clip_reason(result.reason),
            status_code=code,
            provider_code=result.provider_code,
        )
    decision = _retry_or_stop(row, result.reason, now, policy, rand, result.retry_after_s, code)
    return replace(decision, provider_code=result.provider_code or decision.provider_code)


def server_failed(
    row: SendView, result: Classification, now: datetime, policy: RetryPolicy, rand: Rand
) -> Decision:
    """The provider's server failed before the mail reached it (SMTP: connecting, the
    greeting, AUTH, MAIL): back to ``pending``, the attempt handed back (``uncounted``), so
    an outage never spends the mail's attempts, fails it or dead-letters it; only
    ``expires_at`` (``expired``) and MAILBUS_MAX_AGE (``failed``, dead letter ``max_age``)
    still end it. Waiting for the server is the breaker's job:
    the retry is due after the backoff of the attempt the mail is at, or, after a sending
    quota (``QUOTA``), after :func:`~mailbus.consumer.core.backoff.quota_wait`."""
    earlier = replace(row, attempts=max(row.attempts - 1, 0))
    retry_at = _retry_at(earlier, now, policy, rand, result.retry_after_s)
    if result.server_stage == QUOTA:  # a sending quota resets in hours, not seconds
        retry_at = now + timedelta(seconds=quota_wait(policy, result.retry_after_s))
    reason = clip_reason(f"{result.reason} (attempt not counted)")
    if row.expires_at is not None and retry_at >= row.expires_at:
        return Decision(
            Status.EXPIRED,
            reason=clip_reason(f"expires before the next try: {reason}"),
            provider_code=result.provider_code,
            uncounted=True,
        )
    if too_old(row, retry_at, policy.max_age_s):  # a mail held by our account: not sent stale
        return replace(_max_age(earlier, reason, result.status_code), uncounted=True)
    return Decision(
        Status.PENDING,
        retry_at=retry_at,
        reason=reason,
        provider_code=result.provider_code,
        uncounted=True,
    )


_FINAL_NOT_ACCEPTED = frozenset({Status.FAILED, Status.EXPIRED, Status.SUPPRESSED})


def needs_confirmation(decision: Decision, earlier_calls: int) -> bool:
    """Whether ``decision`` must be checked against the provider before it is written: a
    final state other than ``accepted`` for a row with ``earlier_calls`` calls before the
    one (if any) that led to it. One of them may have been accepted unseen (a timeout
    resolved as "not found" while the provider was still working on it); a later 4xx, a
    run of 5xx or the clock passing ``expires_at`` says nothing about that acceptance."""
    return decision.next_status in _FINAL_NOT_ACCEPTED and earlier_calls > 0


def confirm_final(
    row: SendView,
    final: Decision,
    found_message_id: str | None,
    lookup_failed: bool,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    *,
    detail: str = "",
    settle_s: float = 0.0,
) -> Decision:
    """The look-up's verdict on a ``final`` decision that :func:`needs_confirmation`:
    found → ``accepted``; the look-up failed → ``unknown`` (retried later); not found →
    ``final``, once the late-acceptance window and the look-up's settle time have
    passed."""
    if found_message_id:
        return Decision(Status.ACCEPTED, reason="accepted per look-up", message_id=found_message_id)
    if lookup_failed:
        return _lookup_failed(row, detail, now, policy, rand)
    return _unless_in_doubt(row, final, now, policy, settle_s)


def wait_for_provider(row: SendView, provider: str, now: datetime, policy: RetryPolicy) -> Decision:
    """A ``pending`` row whose earlier calls went to ``provider``, which this process cannot
    call: it stays pending, visibly, for a process that can (a row's provider is fixed once
    it was tried, so it is never offered to another)."""
    return Decision(
        Status.PENDING,
        retry_at=now + timedelta(seconds=policy.cap_s),
        reason=clip_reason(f"tried at the {provider} provider, which this process cannot call"),
    )


def after_lookup(
    row: SendView,
    found_message_id: str | None,
    lookup_failed: bool,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
    *,
    detail: str = "",
    settle_s: float = 0.0,
) -> Decision:
    """The decision for an ``unknown`` (or lease-expired ``sending``) row after looking its
    dedupe key up at the provider.

    Found: ``accepted`` with that id. Not found before ``settle_s`` has passed since the
    call in doubt began (``in_doubt_since``): no verdict yet, ``unknown``, looked up again
    (:func:`_not_settled`). Not found after it: the earlier call was not accepted, so a
    retry is safe: ``pending`` with a ``retry_at``, unless attempts are spent or the mail
    expires first. The look-up itself failed (or its reply was malformed, which the
    adapter reports as failed): stay ``unknown`` with a ``retry_at``; the row stays
    visible and is resolved on a later pass. A final state (out of attempts, or expiring
    first) waits out the late-acceptance window as ``unknown``.
    """
    if found_message_id:
        return Decision(Status.ACCEPTED, reason="accepted per look-up", message_id=found_message_id)
    if lookup_failed:
        return _lookup_failed(row, detail, now, policy, rand)
    settles = _settles_at(row, settle_s)
    if settles is not None and now < settles:
        return _not_settled(row, settles, now, policy, rand)
    decision = _retry_or_stop(row, "not accepted per look-up", now, policy, rand, None, None)
    return _unless_in_doubt(row, decision, now, policy, settle_s)


def doubt_without_lookup(
    row: SendView,
    resend: bool,
    keyed: bool,
    now: datetime,
    policy: RetryPolicy,
    rand: Rand,
) -> Decision:
    """:func:`after_lookup` for a provider with no look-up (see ``capability``): with
    ``resend`` (inside an idempotency key's window, or at least once) the row goes back to
    ``pending`` to be sent again, like a "not found"; otherwise it stays ``unknown`` for an
    operator. Under a key (``keyed``), a resend proves nothing until it is made, so a final
    state (out of attempts, expiring first) is never concluded from it: ``unknown``."""
    if not resend:
        why = "no look-up at this provider"
        if keyed:
            why = "in doubt past the idempotency key's window"
        return _lookup_failed(row, f"{why}, waits for an operator", now, policy, rand)
    decision = _retry_or_stop(row, "no look-up: sent again", now, policy, rand, None, None)
    if keyed and decision.next_status in _FINAL_NOT_ACCEPTED:
        return _lookup_failed(row, f"cannot confirm {decision.reason}", now, policy, rand)
    return _unless_in_doubt(row, decision, now, policy)


def resend_closed(now: datetime, policy: RetryPolicy) -> Decision:
    """A ``pending`` row in doubt that may no longer be sent (its idempotency key's window
    passed, and the provider has no look-up): ``unknown``, for an operator to resolve
    (``mailbus send resolve``); never a blind resend."""
    return Decision(
        Status.UNKNOWN,
        retry_at=now + timedelta(seconds=policy.cap_s),
        reason="in doubt past the idempotency key's window: waits for an operator",
    )


def key_in_use(
    row: SendView, window_ends: datetime | None, now: datetime, policy: RetryPolicy
) -> Decision:
    """A row in doubt whose resend the provider refused because it holds the key from an
    earlier request (capability.key_conflict): an earlier call reached it, so the row is
    ``unknown`` for an operator, with no more attempts: it is not taken again before the
    key's window ends (``window_ends``; None: a key kept for good, every ``cap_s``), when a
    resend is no longer allowed anyway."""
    retry_at = window_ends if window_ends is not None else now + timedelta(seconds=policy.cap_s)
    return Decision(
        Status.UNKNOWN,
        retry_at=max(retry_at, now),
        reason="the provider holds this key from an earlier call: waits for an operator",
        status_code=409,
    )


def lease_expired(row_status: Status, lease_until: datetime | None, now: datetime) -> bool:
    """Whether a row is ``sending`` with a lease that has passed (or no lease at all): its
    call's outcome is unknown, and it is resolved like an ``unknown`` row."""
    if row_status != Status.SENDING:
        return False
    return lease_until is None or lease_until <= now


def needs_lookup(row_status: Status, lease_until: datetime | None, now: datetime) -> bool:
    """Whether the row's last call must be resolved by a look-up before anything else."""
    return row_status == Status.UNKNOWN or lease_expired(row_status, lease_until, now)


def _lookup_failed(
    row: SendView, detail: str, now: datetime, policy: RetryPolicy, rand: Rand
) -> Decision:
    head = "look-up failed, outcome unknown"
    reason = clip_reason(f"{head}: {detail}" if detail.strip() else head)
    retry_at = _retry_at(row, now, policy, rand)
    if row.in_doubt_since is not None:  # the longer in doubt, the rarer the look-ups
        doubt_s = (now - row.in_doubt_since).total_seconds()
        retry_at = max(retry_at, now + timedelta(seconds=min(max(doubt_s, 0.0), policy.cap_s)))
    return Decision(Status.UNKNOWN, retry_at=retry_at, reason=reason)


def _settles_at(row: SendView, settle_s: float) -> datetime | None:
    """When a "not found" for ``row`` counts: ``settle_s`` after its call in doubt began."""
    if row.in_doubt_since is None or settle_s <= 0:
        return None
    return row.in_doubt_since + timedelta(seconds=settle_s)


def _not_settled(
    row: SendView, settles: datetime, now: datetime, policy: RetryPolicy, rand: Rand
) -> Decision:
    """A "not found" too early to count: ``unknown``, looked up again as a failed look-up
    would be, and at the latest when it settles."""
    head = f"not found yet: the look-up is believed from {settles.isoformat(timespec='seconds')}"
    waiting = _lookup_failed(row, "", now, policy, rand)
    retry_at = min(waiting.retry_at or settles, settles)
    return Decision(Status.UNKNOWN, retry_at=retry_at, reason=clip_reason(head))


def _unless_in_doubt(
    row: SendView, decision: Decision, now: datetime, policy: RetryPolicy, settle_s: float = 0.0
) -> Decision:
    """``decision``, unless it is final and a call with no known outcome is recent enough
    that the provider may still accept it (or its look-up not yet believed): then
    ``unknown`` until the window has passed."""
    if decision.next_status not in _FINAL_NOT_ACCEPTED or row.in_doubt_since is None:
        return decision
    window_s = max(policy.late_accept_s, settle_s)
    window_ends = row.in_doubt_since + timedelta(seconds=window_s)
    if now >= window_ends:
        return decision
    return Decision(
        Status.UNKNOWN,
        retry_at=window_ends,
        reason=clip_reason(f"look-up again before {decision.next_status.value}: {decision.reason}"),
        status_code=decision.status_code,
    )


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
    if too_old(row, retry_at, policy.max_age_s):
        return _max_age(row, reason, status_code)
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
