"""Providers as adapters of one interface: what the delivery service needs
(docs/architecture.md#providers-as-adapters).

A provider encodes a mail before any row is claimed (:meth:`Provider.prepare`, raising
:class:`~mailbus.kernel.errors.InvalidSendError` for a mail that cannot travel), sends it
(:meth:`Provider.send`, a result value, never an exception for a network problem), looks a
dedupe key up (:meth:`Provider.lookup`) and closes (:meth:`Provider.aclose`). The HTTP
adapter is :class:`mailbus.consumer.provider.HttpProvider`, the SMTP one
:class:`mailbus.providers.smtp.sending.SmtpProvider`; :func:`mailbus.consumer.core.classify_call`
classifies either's result.
"""

from __future__ import annotations

from typing import Any, Protocol

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.smtp_outcome import AnyCallResult
from mailbus.consumer.provider import LookupResult, OutgoingMail

__all__ = ["Provider"]


class Provider(Protocol):
    """The interface the delivery service depends on; ``prepare``'s value is only ever
    handed back to the same provider's ``send``. ``capability`` says what it offers against
    doubt (an idempotency key and its window, a look-up, or neither); ``lookup`` is called
    only when it offers a look-up, with the row's provider key (``OutgoingMail.key``:
    mailbus/kernel/provider_key.py), never its bare dedupe key."""

    capability: Capability

    def prepare(self, mail: OutgoingMail) -> Any: ...

    async def send(self, mail: Any) -> AnyCallResult: ...

    async def lookup(self, dedupe_key: str) -> LookupResult: ...

    async def aclose(self) -> None: ...
