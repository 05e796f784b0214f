"""``POST /webhooks/resend``: Resend's events (Svix-signed), verified and parsed by
:mod:`mailbus.providers.resend.events`."""

from __future__ import annotations

import time
from collections.abc import Mapping

from svix.webhooks import Webhook

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, BodySigned, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings
from mailbus.providers.resend import events as resend_events

__all__ = ["Resend", "receiver"]


class Resend(BodySigned):
    name = "resend"
    max_body = 1 * MIB  # one event per post

    def __init__(self, secret: str, clock: Clock = time.time) -> None:
        try:
            self._hook = Webhook(secret)
        except Exception as exc:  # svix refuses an empty or non-base64 secret, untyped
            raise ValueError(f"not a Svix signing secret: {exc}") from None
        self._clock = clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return resend_events.verify(headers, body, self._hook, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return resend_events.parse(headers, body)


def receiver(settings: Settings, clock: Clock) -> Resend | None:
    """The route MAILBUS_RESEND_WEBHOOK_SECRET enables."""
    if not settings.resend_webhook_secret:
        return None
    try:
        return Resend(settings.resend_webhook_secret, clock)
    except ValueError as exc:
        raise ConfigError("MAILBUS_RESEND_WEBHOOK_SECRET", str(exc)) from None
