"""``POST /webhooks/mailgun``: Mailgun's events, verified and parsed by
:mod:`mailbus.providers.mailgun.events`. Mailgun signs a timestamp and a token, not the
body, so the route remembers each token (docs/guides/delivery-events.md)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.settings import Settings
from mailbus.providers.mailgun import events as mailgun_events

__all__ = ["Mailgun", "receiver"]


class Mailgun:
    name = "mailgun"
    max_body = 1 * MIB  # one event per post
    # a timestamp may lie a whole tolerance ahead of the clock and still verify
    tokens_kept_s = 2.0 * mailgun_events.TOLERANCE_S

    def __init__(self, key: str, clock: Clock = time.time) -> None:
        self._key, self._clock = key, clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return mailgun_events.verify(body, self._key, self._clock())

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        return mailgun_events.token(body)

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return mailgun_events.parse(body)

    async def close(self) -> None:
        return None


def receiver(settings: Settings, clock: Clock) -> Mailgun | None:
    """The route MAILBUS_MAILGUN_WEBHOOK_KEY enables."""
    return Mailgun(settings.mailgun_webhook_key, clock) if settings.mailgun_webhook_key else None
