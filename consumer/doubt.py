"""Doubt resolved the way the provider's capability allows, never by assumption
(docs/architecture.md#rules-every-path-keeps): a call with no known outcome is looked up,
resent (under its key inside the key's window, or at least once when the operator said so)
or left ``unknown``; a final state other than accepted, for a row a provider may hold, is
confirmed by a look-up at the provider that took its calls. A look-up's "not found" counts
only once the provider's settle time has passed since the call in doubt began
(:func:`~mailbus.consumer.core.capability.lookup_settle_s`, MAILBUS_LOOKUP_SETTLE)."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core import (
    Decision,
    RetryPolicy,
    SendView,
    after_lookup,
    confirm_final,
    needs_confirmation,
)
from mailbus.consumer.core.capability import (
    Resolution,
    lookup_settle_s,
    may_resend,
    resolve_unknown,
)
from mailbus.consumer.core.decide import doubt_without_lookup, key_in_use, resend_closed
from mailbus.consumer.provider import LookupResult
from mailbus.consumer.routing import Routing
from mailbus.kernel import metrics

__all__ = ["Doubt"]


class Doubt:
    def __init__(
        self,
        routing: Routing,
        policy: RetryPolicy,
        clock: Callable[[], datetime],
        rand: Callable[[], float] = random.random,
        *,
        at_least_once: bool = False,
        reach_s: float = 0.0,
        settle_s: float | None = None,
    ) -> None:
        self.routing = routing
        self.policy = policy
        self.clock = clock
        self.rand = rand
        self.at_least_once = at_least_once  # MAILBUS_UNKNOWN_OUTCOME=at_least_once
        self.reach_s = reach_s  # a resend must reach the provider this long before a key expires
        self.settle_s = settle_s  # MAILBUS_LOOKUP_SETTLE; None: each provider's own

    def gate_resend(
        self, row: SendView, provider: Provider | None, now: datetime
    ) -> Decision | None:
        """``unknown`` for a row in doubt that its provider's capability no longer lets us
        send again (:func:`may_resend`), else None."""
        if provider is None:
            return None
        in_doubt = row.in_doubt_since is not None
        if may_resend(
            provider.capability, in_doubt, row.first_tried_at, now, self.at_least_once, self.reach_s
        ):
            return None
        return resend_closed(now, self.policy)

    def key_used(self, row: SendView, route: str | None, now: datetime) -> Decision:
        """A row in doubt whose resend the provider refused as holding its key already:
        ``unknown`` for an operator, not taken again while the key's window lasts."""
        provider = self.routing.provider_for(route)
        key = provider.capability.key if provider is not None else None
        window_ends = None
        if key is not None and key.window_s is not None and row.first_tried_at is not None:
            window_ends = row.first_tried_at + timedelta(seconds=key.window_s)
        return key_in_use(row, window_ends, now, self.policy)

    def must_confirm(
        self, decision: Decision, earlier_calls: int, row: SendView, route: str | None
    ) -> bool:
        """:func:`needs_confirmation`, except at a provider with no look-up (SMTP) for a row
        never in doubt: its earlier calls all had definite replies, none was accepted."""
        if not needs_confirmation(decision, earlier_calls):
            return False
        provider = self.routing.provider_for(route)
        return provider is None or provider.capability.look_up or row.in_doubt_since is not None

    async def confirm(self, row: SendView, final: Decision, route: str | None) -> Decision:
        """A final state other than accepted, checked against the provider that took it."""
        found = await self._lookup(row.key, route)
        return confirm_final(
            row,
            final,
            found.message_id,
            found.failed,
            self.clock(),
            self.policy,
            self.rand,
            detail=found.detail,
            settle_s=self._settle_s(route),
        )

    async def decide(self, row: SendView, route: str | None) -> Decision:
        """Resolve a call with no known outcome the way the provider's capability allows:
        a look-up, a resend (under the key inside its window, or at least once), or wait."""
        provider = self.routing.provider_for(route)
        if provider is not None and not provider.capability.look_up:
            capability = provider.capability
            now = self.clock()
            resolution = resolve_unknown(
                capability, row.first_tried_at, now, self.at_least_once, self.reach_s
            )
            resend = resolution is Resolution.RESEND
            keyed = capability.key is not None
            return doubt_without_lookup(row, resend, keyed, now, self.policy, self.rand)
        found = await self._lookup(row.key, route)
        return after_lookup(
            row,
            found.message_id,
            found.failed,
            self.clock(),
            self.policy,
            self.rand,
            detail=found.detail,
            settle_s=self._settle_s(route),
        )

    def _settle_s(self, route: str | None) -> float:
        provider = self.routing.provider_for(route)
        return 0.0 if provider is None else lookup_settle_s(provider.capability, self.settle_s)

    async def _lookup(self, key: str, route: str | None) -> LookupResult:
        """Ask the provider that took the calls whether it accepted the key (the row's
        provider key, mailbus/kernel/provider_key.py)."""
        provider = self.routing.provider_for(route)
        if provider is None:
            return LookupResult(None, True, f"the {route} provider is not configured here")
        capability = provider.capability
        if not capability.look_up:  # nothing to ask: at least once takes no answer as "no"
            blind = self.at_least_once and capability.key is None
            return LookupResult(None, not blind, "no look-up at this provider")
        await self.routing.gate_for(route).before_request()  # its 429 pause, its rate limit
        metrics.observe_lookup()
        return await provider.lookup(key)
