"""Which provider takes a mail's call: the row's own once claimed, the fallback for a first
attempt whose policy allows it while the primary's breaker is not closed (unless the
fallback's own breaker is open too and the primary's probe is due), else this
process's provider (the default one, or its priority's own: ``MAILBUS_PROVIDER_P0_URL``
and the like).

The fallback's calls are recorded under its kind (``fallback:postmark``,
mailbus/kernel/send_routes.py): a row in doubt at one fallback is never looked up or sent at
another that a restart with another MAILBUS_FALLBACK_PROVIDER put in its place. The same
holds for the primary: a row records the kind of the provider its first claim went to
(``email_sends.provider_kind``, migration 0071), and a process whose provider for that route
is of another kind (MAILBUS_PROVIDER switched, postmark → resend) never calls or looks it up:
it waits for a process with that provider, or an operator."""

from __future__ import annotations

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core.breaker import BreakerState
from mailbus.consumer.core.decide import tried
from mailbus.consumer.gate import ProviderGate
from mailbus.consumer.ledger import LoadedSend
from mailbus.kernel.send_routes import FALLBACK, fallback_route
from mailbus_client.policies import PolicyBook

__all__ = ["Routing"]


class Routing:
    def __init__(
        self,
        provider: Provider,
        provider_name: str | None,
        fallback: Provider | None,
        policies: PolicyBook,
        gate: ProviderGate,
        fallback_gate: ProviderGate,
        fallback_kind: str = "http",
        provider_kind: str = "http",
    ) -> None:
        self.primary = provider
        self.provider_name = provider_name  # email_sends.provider of its calls; None: default
        self.provider_kind = provider_kind  # MAILBUS_PROVIDER's; a priority's own: http
        self.fallback = fallback
        self.fallback_kind = fallback_kind  # MAILBUS_FALLBACK_PROVIDER's
        self.fallback_route = fallback_route(fallback_kind)
        self.policies = policies
        self.gate = gate
        self.fallback_gate = fallback_gate

    def route(self, loaded: LoadedSend) -> str | None:
        """The route of a row's next call. A row's provider is fixed by its first claim
        (:func:`~mailbus.consumer.core.decide.tried`), as its provider key is: a mail one
        provider may have accepted is never offered to another, whatever later reset its
        attempts (a refusal about our account, a claim handed back, a dead letter replayed).
        A first call goes where a breaker lets it out: the fallback while the primary's is
        not closed, but the primary when only the primary's probe is due; a first call
        waiting at one breaker follows this route when it changes (DeliveryService)."""
        row = loaded.view
        if tried(row):
            return self.taken_by(loaded)
        return self.first_route(row.template)

    def first_route(self, template: str) -> str | None:
        """The route of a never-claimed row's first call, by its template's policy."""
        when_down = self.policies.for_template(template).when_provider_down
        if (
            when_down == "fallback"
            and self.fallback is not None
            and self.gate.breaker.state is not BreakerState.CLOSED
            and (self.fallback_gate.admits() or not self.gate.admits())
        ):
            return self.fallback_route
        return self.provider_name

    def taken_by(self, loaded: LoadedSend) -> str | None:
        """The route of the provider that took a row's calls: the one it records, unless
        that provider here is of another kind than the row's first claim recorded
        (``provider_kind``; NULL before migration 0071: any); then the recorded kind, a
        route no provider of this process serves."""
        route, kind = loaded.provider, loaded.provider_kind
        if kind is None or self.provider_for(route) is None or self.kind_for(route) == kind:
            return route
        return kind

    def kind_for(self, route: str | None) -> str:
        """The kind of this process's provider for ``route`` (``http``, ``postmark``, ...),
        as a claim records it and a synchronous refusal's source names it."""
        return self.fallback_kind if self.is_fallback(route) else self.provider_kind

    def label_for(self, route: str | None) -> str:
        """``route``'s provider as metrics name it: its kind, or ``fallback:<kind>`` (whose
        key is MAILBUS_FALLBACK_PROVIDER_API_KEY_FILE, not MAILBUS_PROVIDER_API_KEY_FILE)."""
        return self.fallback_route if self.is_fallback(route) else self.provider_kind

    def is_fallback(self, route: str | None) -> bool:
        """Whether ``route`` is this process's fallback: its own kind, or the bare
        ``fallback`` of the calls recorded before the kind was."""
        return self.fallback is not None and route in (self.fallback_route, FALLBACK)

    def gate_for(self, route: str | None) -> ProviderGate:
        """The gate a request on ``route`` passes (its breaker, its 429 pause): the
        fallback's own, or the primary's."""
        return self.fallback_gate if self.is_fallback(route) else self.gate

    def provider_for(self, route: str | None) -> Provider | None:
        """The provider for ``route``; None when this process has no such provider (the
        fallback, or a fallback of another kind, or another priority's provider, not
        configured here)."""
        if self.is_fallback(route):
            return self.fallback
        return self.primary if route == self.provider_name else None
