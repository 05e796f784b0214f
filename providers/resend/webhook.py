"""``POST /webhooks/resend``: Resend's events (Svix-signed), verified and parsed by
:mod:`mailbus.providers.resend.events`."""

from __future__ import annotations

import time
from collections.abc import Mapping

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, BodySigned, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings

__all__ = ["Resend", "receiver"]


class Resend(BodySigned):
    name = "resend"
    max_body = 1 * MIB  # one event per post

    def __init__(self, secret: str, clock: Clock = time.time) -> None:
        from mailbus.providers.resend import events  # svix: the [resend] extra

        self._events = events
        self._hook = events.signing_hook(secret)
        self._clock = clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return self._events.verify(headers, body, self._hook, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return self._events.parse(headers, body)


def receiver(settings: Settings, clock: Clock) -> Resend | None:
    """The route MAILBUS_RESEND_WEBHOOK_SECRET enables."""
    if not settings.resend_webhook_secret:
        return None
    try:
        return Resend(settings.resend_webhook_secret, clock)
    except ValueError as exc:
        raise ConfigError("MAILBUS_RESEND_WEBHOOK_SECRET", str(exc)) from None
