"""Per-recipient-domain throttling, as values: one domain that defers slows only itself.

A mailbox provider that finds a sender too fast answers for its own domain only: SMTP
``421`` (service not available, try later) or ``452`` (insufficient storage / too many
recipients) to RCPT or DATA (the same codes to the greeting or MAIL are the server's own
state, see ``smtp_outcome``), or, from an HTTP email API, a ``429`` marked as scoped to
the recipient's domain (header ``X-Throttle-Scope: recipient-domain``; a plain 429 still
pauses every send, it is the API's own limit). Such a reply pauses that domain alone: for
its Retry-After, and at least ``base_s`` doubling with every throttle in a row (up to
``cap_s``); the next accepted mail of the domain clears it. Mail to a paused domain waits
as ``pending`` with a later ``next_try_at`` and no attempt spent; every other domain is
sent as before. The pauses are a mapping ``domain -> DomainPause`` replaced, never
mutated; time is passed in (monotonic seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from mailbus.consumer.core.decide import Decision
from mailbus.consumer.core.outcome import Classification, Outcome, clip_reason
from mailbus.consumer.core.states import Status

__all__ = [
    "DomainPause",
    "DomainPolicy",
    "Pauses",
    "clear",
    "deferred",
    "domain_throttled",
    "pause_left",
    "recipient_domain",
    "throttle",
]

Pauses = Mapping[str, "DomainPause"]
_DOMAIN_CODES = ("421", "452")  # SMTP replies that throttle the recipient's domain


@dataclass(frozen=True)
class DomainPolicy:
    base_s: float = 5.0
    cap_s: float = 300.0
    max_domains: int = 10_000  # pauses kept at most; the oldest ended ones go first


@dataclass(frozen=True)
class DomainPause:
    until: float  # monotonic seconds
    strikes: int  # throttles in a row


def recipient_domain(address: str) -> str:
    """The part after the last ``@``, lower-cased (``""`` for an address without one)."""
    _, at, domain = address.rpartition("@")
    return domain.strip().lower() if at else ""


def domain_throttled(result: Classification) -> bool:
    """Whether a call's result throttles the recipient's domain rather than the sender."""
    if result.outcome is not Outcome.RETRY or result.server_stage is not None:
        return False  # a greeting's 421 is the server's connection limit, not the domain's
    if result.domain_scoped:
        return True
    code = result.provider_code or ""
    return result.status_code is None and code.split(" ")[0] in _DOMAIN_CODES


def throttle(
    pauses: Pauses,
    domain: str,
    now: float,
    retry_after_s: float | None,
    policy: DomainPolicy,
) -> dict[str, DomainPause]:
    """``pauses`` with ``domain`` paused after one more throttle in a row. A throttle that
    arrives while the domain is already paused was a call made before the pause was known
    (several in flight at once): it counts no strike, only its Retry-After extends."""
    earlier = pauses.get(domain)
    if earlier is not None and now < earlier.until:
        wait = min(retry_after_s or 0.0, policy.cap_s)
        if now + wait <= earlier.until:
            return dict(pauses)
        kept = dict(pauses)
        kept[domain] = DomainPause(now + wait, earlier.strikes)
        return kept
    strikes = 1 if earlier is None else earlier.strikes + 1
    backoff = min(policy.cap_s, policy.base_s * 2 ** min(strikes - 1, 30))
    wait = max(backoff, min(retry_after_s or 0.0, policy.cap_s))
    kept = _bounded(pauses, now, policy)
    kept[domain] = DomainPause(now + wait, strikes)
    return kept


def clear(pauses: Pauses, domain: str) -> Pauses:
    """``pauses`` after the domain accepted a mail: its run of throttles is over."""
    if domain not in pauses:
        return pauses
    return {d: p for d, p in pauses.items() if d != domain}


def pause_left(pauses: Pauses, domain: str, now: float) -> float:
    """Seconds the domain stays paused (0: send)."""
    pause = pauses.get(domain)
    return 0.0 if pause is None else max(0.0, pause.until - now)


def deferred(domain: str, left_s: float, now: datetime) -> Decision:
    """A ``pending`` row to a paused domain: it stays pending, due when the pause ends, and
    spends no attempt (no call is made)."""
    return Decision(
        Status.PENDING,
        retry_at=now + timedelta(seconds=left_s),
        reason=clip_reason(f"recipient domain {domain} is throttling: deferred"),
    )


def _bounded(pauses: Pauses, now: float, policy: DomainPolicy) -> dict[str, DomainPause]:
    """A copy without the pauses that ended longest ago, once there are too many."""
    kept = dict(pauses)
    if len(kept) >= policy.max_domains:
        for domain, _ in sorted(kept.items(), key=lambda item: item[1].until)[
            : len(kept) - policy.max_domains + 1
        ]:
            if kept[domain].until <= now:
                del kept[domain]
    return kept
