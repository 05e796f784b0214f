"""``POST /webhooks/{ses,sendgrid,mailgun,postmark,resend}``: each enabled provider's own
route, an aiohttp adapter over the pure modules of :mod:`mailbus.feedback.native`.

In this order: the raw body is read; the request is verified that provider's way
(forged, unsigned or malformed: 401 and nothing changes; signed but stale: 200
``{"result": "ignored", "reason": "stale"}``, counted in
``mailbus_webhook_ignored{reason="stale"}``, nothing changes); the body is parsed (400
naming the field); an SNS subscription confirmation is confirmed (200 ``subscribed``);
every delivery event is recorded as the ``Mailbus-Signature`` route records it
(:mod:`mailbus.feedback.store`: once per provider and event id, so a replay changes nothing and
counts as ``duplicate``). The answer counts the request's events by result. A storage
failure, or an SNS certificate that cannot be fetched, is 503 (the provider retries).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from aiohttp import web
from svix.webhooks import Webhook

from mailbus.feedback.events import DeliveryEvent, InvalidEventError
from mailbus.feedback.native import mailgun_events, postmark_events, resend_events, sns
from mailbus.feedback.native.certificates import CertificateSource, FetchError
from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.sendgrid_events import Verifier
from mailbus.feedback.native.sendgrid_events import parse as parse_sendgrid
from mailbus.feedback.signature import Verdict
from mailbus.feedback.store import Recorded
from mailbus.kernel import metrics
from mailbus.kernel.errors import StorageError

__all__ = [
    "Mailgun",
    "NativeReceiver",
    "Postmark",
    "Resend",
    "SendGrid",
    "Ses",
    "add_native_routes",
]

log = logging.getLogger("mailbus.webhooks")

Clock = Callable[[], float]


class NativeReceiver(Protocol):
    name: str

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict: ...

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound: ...


class _Recorder(Protocol):
    async def record(self, provider: str, event: DeliveryEvent) -> Recorded: ...


class Mailgun:
    name = "mailgun"

    def __init__(self, key: str, clock: Clock = time.time) -> None:
        self._key, self._clock = key, clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return mailgun_events.verify(body, self._key, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return mailgun_events.parse(body)


class Resend:
    name = "resend"

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


class SendGrid:
    name = "sendgrid"

    def __init__(self, public_key: str, clock: Clock = time.time) -> None:
        self._verifier, self._clock = Verifier(public_key), clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return self._verifier.verify(headers, body, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return parse_sendgrid(body)


class Postmark:
    name = "postmark"

    def __init__(self, credentials: str) -> None:
        self._credentials = credentials

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return postmark_events.verify(headers.get("Authorization"), self._credentials)

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return postmark_events.parse(body)


class Ses:
    """SES through SNS: only the ``topic_arns`` given; certificates from ``source``."""

    name = "ses"

    def __init__(
        self, topic_arns: frozenset[str], source: CertificateSource, clock: Clock = time.time
    ) -> None:
        self._topics, self._source, self._clock = topic_arns, source, clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        message = sns.envelope(body)
        if message is None:
            return Verdict(False, "malformed")
        if message.get("TopicArn") not in self._topics:
            return Verdict(False, "topic")
        url = message.get("SigningCertURL", "")
        if not sns.allowed_url(url, self._source.hosts):
            return Verdict(False, "cert_url")
        pem = await self._source.certificate(url)  # FetchError: 503
        return sns.check_signature(message, pem, datetime.fromtimestamp(self._clock(), UTC))

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        message = sns.envelope(body)
        assert message is not None  # verified before
        inbound = sns.parse(message)
        if inbound.subscribe_url is not None:
            await self._source.confirm(inbound.subscribe_url)
        return inbound


def add_native_routes(
    app: web.Application, store: _Recorder, receivers: Sequence[NativeReceiver]
) -> None:
    """One route per receiver; add before the generic ``/webhooks/{provider}``."""
    for receiver in receivers:
        app.router.add_post(f"/webhooks/{receiver.name}", _handler(store, receiver))


def _handler(
    store: _Recorder, receiver: NativeReceiver
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    name = receiver.name

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verdict = await receiver.verify(request.headers, body)
        except FetchError as exc:
            log.warning("webhook from %s not verified: %s", name, exc)
            return _answer(503, {"Retry-After": "5"}, error="signing certificate unavailable")
        if verdict.reason == "stale":
            metrics.observe_webhook_ignored(name, "stale")
            log.info("stale webhook from %s ignored", name)
            return _answer(200, result="ignored", reason="stale")
        if not verdict.ok:
            metrics.observe_webhook_rejected(verdict.reason)
            log.warning("webhook from %s refused: %s", name, verdict.reason)
            return _answer(401, error=f"not verified as {name}: {verdict.reason}")
        try:
            inbound = await receiver.parse(request.headers, body)
        except InvalidEventError as exc:
            metrics.observe_webhook_rejected("invalid")
            return _answer(400, error=str(exc))
        except FetchError as exc:
            log.warning("subscription for %s not confirmed: %s", name, exc)
            return _answer(503, {"Retry-After": "5"}, error="subscription not confirmed")
        if inbound.subscribe_url is not None:
            log.info("%s subscription confirmed", name)
            return _answer(200, result="subscribed")
        if inbound.skipped:
            metrics.observe_webhook_ignored(name, "untracked", inbound.skipped)
        try:
            recorded = await asyncio.gather(*(store.record(name, e) for e in inbound.events))
        except StorageError as exc:
            log.error("delivery events from %s not recorded: %s", name, exc)
            return _answer(503, {"Retry-After": "5"}, error="storage unavailable, retry")
        counts = {"stored": 0, "duplicate": 0, "unmatched": 0}
        for event, outcome in zip(inbound.events, recorded, strict=True):
            metrics.observe_webhook_event(
                event.type, event.bounce, outcome.result, outcome.suppressed
            )
            counts[outcome.result] += 1
        suppressed = sum(outcome.suppressed for outcome in recorded)
        result = "duplicate" if counts["duplicate"] == len(recorded) and recorded else "stored"
        if not recorded:
            result = "ignored"
        return _answer(200, result=result, **counts, ignored=inbound.skipped, suppressed=suppressed)

    return receive


def _answer(code: int, headers: dict[str, str] | None = None, /, **fields: object) -> web.Response:
    return web.json_response(fields, status=code, headers=headers)
