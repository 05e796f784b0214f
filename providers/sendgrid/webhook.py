"""``POST /webhooks/sendgrid``: SendGrid's signed event batches, verified and parsed by
:mod:`mailbus.providers.sendgrid.events`."""

from __future__ import annotations

import time
from collections.abc import Mapping

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, BodySigned, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings
from mailbus.providers.sendgrid.events import Verifier
from mailbus.providers.sendgrid.events import parse as parse_sendgrid

__all__ = ["SendGrid", "receiver"]


class SendGrid(BodySigned):
    name = "sendgrid"
    max_body = 8 * MIB  # up to MAX_EVENTS (10,000) events of well under 1 KiB each

    def __init__(self, public_key: str, clock: Clock = time.time) -> None:
        self._verifier, self._clock = Verifier(public_key), clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return self._verifier.verify(headers, body, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return parse_sendgrid(body)


def receiver(settings: Settings, clock: Clock) -> SendGrid | None:
    """The route MAILBUS_SENDGRID_WEBHOOK_KEY enables."""
    if not settings.sendgrid_webhook_key:
        return None
    try:
        return SendGrid(settings.sendgrid_webhook_key, clock)
    except ValueError as exc:
        raise ConfigError("MAILBUS_SENDGRID_WEBHOOK_KEY", str(exc)) from None
