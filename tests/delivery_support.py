"""Helpers of integration tests that run the real DeliveryService on a real ledger against
a scripted provider: the provider, the service, and a pointer for a row."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.breaker import BreakerPolicy
from mailbus.consumer.core.outcome import CallResult, ProviderReply
from mailbus.consumer.gate import ProviderGate
from mailbus.consumer.http_wire import HttpCall
from mailbus.consumer.ledger import MessageOrigin, SendLedger
from mailbus.consumer.provider import LookupResult, MailbusDialect, OutgoingMail, PreparedMail
from mailbus.consumer.service import DeliveryService
from mailbus.schemas.codec import SendPointer, send_pointer_codec
from mailbus_client.policies import configured_policy_book

__all__ = ["ScriptedProvider", "origin_for", "reconcile_then_deliver", "service_for"]


class ScriptedProvider:
    """Answers every send with ``reply(key)`` (503 by default); knows ``accepted`` keys on
    look-up; records what was sent and looked up."""

    capability = MailbusDialect.capability

    def __init__(
        self,
        accepted: dict[str, str] | None = None,
        reply: Callable[[str], CallResult] = lambda _key: ProviderReply(503),
    ) -> None:
        self.accepted = dict(accepted or {})
        self.reply = reply
        self.sent: list[str] = []
        self.looked_up: list[str] = []

    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        return PreparedMail(mail.key, HttpCall("POST", "http://provider/v1/send", {}))

    async def send(self, mail: PreparedMail) -> CallResult:
        self.sent.append(mail.key)
        return self.reply(mail.key)

    async def lookup(self, key: str) -> LookupResult:
        self.looked_up.append(key)
        return LookupResult(self.accepted.get(key), False)

    async def aclose(self) -> None:
        pass


def service_for(
    ledger: SendLedger,
    provider: ScriptedProvider,
    policy: RetryPolicy,
    breaker: BreakerPolicy | None = None,
    **kwargs: Any,
) -> DeliveryService:
    gate = ProviderGate(4, breaker or BreakerPolicy(), None, lambda _s: None, lambda _l: None)
    return DeliveryService(
        ledger,
        provider,  # type: ignore[arg-type]
        gate,
        policy,
        slot_wait_s=1.0,
        policies=configured_policy_book({}),
        rand=lambda: 0.5,
        **kwargs,
    )


def origin_for(
    send_id: int, key: str, attempt: int, priority: str = "p1", *, first_attempt: str | None = None
) -> MessageOrigin:
    """A pointer as the relay publishes it; ``first_attempt``: the template its header names
    for a row never claimed (the consumer claims it as it loads it)."""
    pointer = SendPointer.of(send_id, key, priority, attempt, datetime.now(UTC))
    value = send_pointer_codec().encode(pointer)
    return MessageOrigin(f"t.send.{priority}", 0, send_id, None, value, None, first_attempt)


async def reconcile_then_deliver(
    ledger: SendLedger, service: DeliveryService, send_id: int, key: str
) -> None:
    """The reconciler's pass over the rows left in doubt (priority p1), then a pointer to
    ``send_id`` at the attempt it has now, as the relay would publish it."""
    for loaded, token in await ledger.take_unresolved(["p1"], 10):
        await service.resolve(loaded, token)
    fresh = await ledger.load(send_id)
    assert fresh is not None
    await service.handle(origin_for(send_id, key, fresh.view.attempts))
