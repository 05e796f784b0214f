"""``POST /webhooks/postmark``: Postmark's records behind basic auth, verified and parsed by
:mod:`mailbus.providers.postmark.events`."""

from __future__ import annotations

from collections.abc import Mapping

from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import MIB, BodySigned, Clock
from mailbus.feedback.signature import Verdict
from mailbus.kernel.settings import Settings
from mailbus.providers.postmark import events as postmark_events

__all__ = ["Postmark", "receiver"]


class Postmark(BodySigned):
    name = "postmark"
    # one record; a bounce may carry the message's content (Postmark takes up to 10 MB)
    max_body = 16 * MIB

    def __init__(self, credentials: str) -> None:
        self._credentials = credentials

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return postmark_events.verify(headers.get("Authorization"), self._credentials)

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return postmark_events.parse(body)


def receiver(settings: Settings, clock: Clock) -> Postmark | None:
    """The route MAILBUS_POSTMARK_WEBHOOK_AUTH enables."""
    auth = settings.postmark_webhook_auth
    return Postmark(auth) if auth else None
