"""What stands between a mail and the provider, per consumer process:

- the **adaptive in-flight limit** (:class:`AdaptiveSlots` sized by ``core.concurrency``)
  on provider calls, and a quarter more on claimed rows (``claims``), so the next rows are
  claimed while calls are still out but never many more than there are slots for,
- the **circuit breaker** (``core.breaker``): while open nothing is sent or claimed;
  deliveries wait before they take a ``claims`` permit (a waiting newsletter never holds
  one a password reset needs), and the Kafka source's backpressure pauses the partitions,
- a **429 pause**: a 429 (or a provider's own rate-limit reply, ``throttled``) stops every
  send of this process for its Retry-After; it is the provider answering, so it never
  feeds the breaker, nor does a retry the provider asks for about one request
  (``transient``); a reply about our account, sender or quota (``server_stage``) does,
- **per-domain pauses** (``core.domains``): a 421/452, or a 429 scoped to the recipient's
  domain, pauses that domain alone; the service defers its mail without a call,
- the **recovery cap** (``recovery_pacer.RecoveryPacer``): once the breaker closes after an
  outage, sends of every process share a ramping cap, P0 first,
- the **global rate limit** (``rate_limit.GlobalRateLimiter``), for sends and look-ups.

Waiting happens before a row is claimed, so a long outage never outlives a lease.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType

from mailbus.consumer.core.breaker import Breaker, BreakerPolicy, BreakerState, admit, record
from mailbus.consumer.core.concurrency import AdaptiveLimit, LimitPolicy, on_latency, restart_slowly
from mailbus.consumer.core.domains import (
    DomainPolicy,
    Pauses,
    clear,
    domain_throttled,
    pause_left,
    throttle,
)
from mailbus.consumer.core.outcome import Classification, Outcome
from mailbus.consumer.core.recovery import starts_recovery
from mailbus.consumer.rate_limit import GlobalRateLimiter
from mailbus.consumer.recovery_pacer import RecoveryPacer

__all__ = ["AdaptiveSlots", "Admission", "ProviderGate"]


class AdaptiveSlots:
    """An asyncio semaphore whose size can change while it is in use.

    Waiters are served first come, first served, and a freed slot is handed to exactly one
    of them (no thundering herd of re-checks when hundreds wait).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value
        self._hand_over()

    async def acquire(self, timeout: float | None = None) -> bool:
        """Take a slot, waiting in line; False if none came within ``timeout`` seconds."""
        if self.in_use < self._limit and not self._waiters:
            self.in_use += 1
            return True
        granted = asyncio.get_running_loop().create_future()
        self._waiters.append(granted)
        try:
            async with asyncio.timeout(timeout):
                await granted
        except (asyncio.CancelledError, TimeoutError) as exc:
            if granted.done() and not granted.cancelled():  # handed a slot at the last moment
                self.release()
            elif granted in self._waiters:
                self._waiters.remove(granted)
            if isinstance(exc, TimeoutError):
                return False
            raise
        return True

    def release(self) -> None:
        self.in_use -= 1
        self._hand_over()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.release()

    def _hand_over(self) -> None:
        while self._waiters and self.in_use < self._limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_use += 1
                waiter.set_result(None)


@dataclass
class Admission:
    probe: bool = False  # the one call a half-open breaker lets through
    settled: bool = False


class ProviderGate:
    def __init__(
        self,
        max_in_flight: int,
        breaker_policy: BreakerPolicy,
        rate_limiter: GlobalRateLimiter | None,
        on_breaker_change: Callable[[BreakerState], None],
        on_limit_change: Callable[[int], None],
        default_pause_s: float = 1.0,
        unhurried_delay_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        recovery: RecoveryPacer | None = None,
    ) -> None:
        self.slots = AdaptiveSlots(max_in_flight)
        self.claims = AdaptiveSlots(_claims_for(max_in_flight))
        self.breaker = Breaker()
        self._breaker_policy = breaker_policy
        self._limit_policy = LimitPolicy(max_limit=max_in_flight)
        self._limit = AdaptiveLimit(float(max_in_flight))
        self._rate_limiter = rate_limiter
        self._on_breaker_change = on_breaker_change
        self._on_limit_change = on_limit_change
        self._default_pause_s = default_pause_s
        self._clock = clock
        self._paused_until = 0.0
        self._unhurried_delay_s = unhurried_delay_s
        self._recovered_at = float("-inf")
        self._hurried_waiting = 0  # transactional sends waiting for the breaker
        self._recovery = recovery
        self._not_closed_since = 0.0  # when the breaker last left CLOSED
        self._recovery_due = False  # the breaker closed after an outage: start the ramp
        self._domains: Pauses = {}
        self._domains_paused_until = 0.0  # the latest end of a domain's pause
        self._domain_policy = DomainPolicy()

    async def admit_send(
        self, unhurried: bool = False, p0: bool = False, still: Callable[[], bool] = lambda: True
    ) -> Admission | None:
        """Wait until a send may go out: breaker, recovery cap (``p0`` sends first), 429
        pause, rate limit; None if ``still()`` turned False while it waited at the breaker
        (its mail's route changed). ``unhurried`` mail
        (a ``pause`` policy: campaigns) probes a recovering provider only when no
        transactional mail is waiting to, and waits ``unhurried_delay_s`` after the breaker
        closes, so transactional mail drains first. Without the probe a process that
        carries only newsletters would never close its breaker."""
        if not unhurried:
            self._hurried_waiting += 1
        try:
            probe = await self._wait_for_breaker(unhurried, still)
        finally:
            if not unhurried:
                self._hurried_waiting -= 1
        if probe is None:
            return None
        if unhurried and (wait := self._recovered_at + self._unhurried_delay_s - self._clock()) > 0:
            await asyncio.sleep(wait)
        if self._recovery is not None and not probe:
            if self._recovery_due:
                self._recovery_due = False
                await self._recovery.start()
            await self._recovery.acquire(p0)
        await self.before_request()
        return Admission(probe=probe)

    def holds(self, admission: Admission) -> bool:
        """Whether an admission still stands: the breaker may have opened while its mail
        waited for a claim permit, and then only the probe may go."""
        return admission.probe or self.breaker.state is BreakerState.CLOSED

    async def close(self) -> None:
        """Close the rate limit's database connection, if it has one."""
        if self._rate_limiter is not None:
            await self._rate_limiter.close()

    def admits(self) -> bool:
        """Whether the breaker would let a send out now (closed, or its probe due), taking
        nothing."""
        return admit(self.breaker, self._clock())[1]

    async def _wait_for_breaker(self, unhurried: bool, still: Callable[[], bool]) -> bool | None:
        """Wait until the breaker admits a call; True if that call is its probe, None if
        ``still()`` turned False first."""
        while True:
            if not still():
                return None
            if (
                unhurried
                and self._hurried_waiting
                and self.breaker.state is not BreakerState.CLOSED
            ):
                await asyncio.sleep(0.25)  # transactional mail tests recovery first
                continue
            was_closed = self.breaker.state is BreakerState.CLOSED
            breaker, allowed = admit(self.breaker, self._clock())
            self._set_breaker(breaker)
            if allowed:
                return not was_closed
            wait = self.breaker.opened_at + self.breaker.cool_down_s - self._clock()
            await asyncio.sleep(min(max(wait, 0.05), 0.25))

    async def before_request(self) -> None:
        """Every provider request, look-ups included: the 429 pause and the rate limit."""
        while (wait := self._paused_until - self._clock()) > 0:
            await asyncio.sleep(wait)
        if self._rate_limiter is not None:
            await self._rate_limiter.acquire()

    def release(self, admission: Admission) -> None:
        """An admitted send that did not happen (the row was claimed elsewhere); only the
        probe's own hand-back lets another probe out."""
        if admission.probe and not admission.settled and self.breaker.probe_out:
            self._set_breaker(replace(self.breaker, probe_out=False))
        admission.settled = True

    def domain_pause(self, domain: str) -> float:
        """Seconds the recipient domain stays paused (0: it may be sent to)."""
        return pause_left(self._domains, domain, self._clock())

    def passes_at_once(self) -> bool:
        """Whether a send would be let out now without a wait for the breaker, a 429 pause
        or any recipient domain's pause, taking nothing (the rate limit and a recovery
        ramp's cap, which only pace sends, aside)."""
        now = self._clock()
        return (
            self.breaker.state is BreakerState.CLOSED
            and self._paused_until <= now
            and self._domains_paused_until <= now
        )

    def settle(
        self, admission: Admission, result: Classification, latency_s: float, domain: str = ""
    ) -> None:
        admission.settled = True
        now = self._clock()
        if domain and domain_throttled(result):
            self._domains = throttle(
                self._domains, domain, now, result.retry_after_s, self._domain_policy
            )
            self._domains_paused_until = max(
                self._domains_paused_until, self._domains[domain].until
            )
        elif result.throttled:
            pause = result.retry_after_s or self._default_pause_s
            self._paused_until = max(self._paused_until, now + pause)
        elif result.outcome is Outcome.ACCEPTED and domain:
            before, self._domains = self._domains, clear(self._domains, domain)
            if self._domains is not before:  # that domain's pause, if any, is over
                self._domains_paused_until = max(
                    (pause.until for pause in self._domains.values()), default=0.0
                )
        healthy = result.outcome in (Outcome.ACCEPTED, Outcome.REJECTED) or (
            result.throttled or result.transient or domain_throttled(result)
        )
        was_open = self.breaker.state is not BreakerState.CLOSED
        # half-open, only the probe's reply counts: a late one to a call from before the
        # outage would reopen it with no probe out, and a second probe would go
        if admission.probe or self.breaker.state is not BreakerState.HALF_OPEN:
            self._set_breaker(record(self.breaker, healthy, now, self._breaker_policy))
        if was_open and self.breaker.state is BreakerState.CLOSED:
            self._recovered_at = now
            if self._recovery is not None:
                outage_s = now - self._not_closed_since
                self._recovery_due = starts_recovery(self._recovery.policy, outage_s)
            self._limit = restart_slowly(self._limit, self._limit_policy)  # resume unhurried
        elif healthy:
            self._limit = on_latency(self._limit, latency_s, now, self._limit_policy)
        self._resize()

    def _resize(self) -> None:
        if self._limit.slots != self.slots.limit:
            self.slots.limit = self._limit.slots
            self.claims.limit = _claims_for(self._limit.slots)
            self._on_limit_change(self.slots.limit)

    def _set_breaker(self, breaker: Breaker) -> None:
        changed = breaker.state is not self.breaker.state
        if changed and self.breaker.state is BreakerState.CLOSED:
            self._not_closed_since = self._clock()
        self.breaker = breaker
        if changed:
            self._on_breaker_change(breaker.state)


def _claims_for(slots: int) -> int:
    """Rows that may be claimed at once: the calls, plus a quarter waiting for a slot."""
    return slots + max(1, slots // 4)
