"""``POST /webhooks/{ses,sendgrid,mailgun,postmark,resend}``: each enabled provider's own
route, an aiohttp adapter over the pure modules of :mod:`mailbus.feedback.native`.

In this order, nothing changing until the last step (docs/guides/delivery-events.md#limits):
the raw body is read up to the provider's limit (``max_body``, from its documented batch
size: 413 past it, read no further); a body nesting JSON deeper than
:data:`~mailbus.feedback.native.inbound.MAX_DEPTH` is refused (400) before anything parses
or authenticates it; the request is verified that provider's way (forged, unsigned,
malformed or stale: 401, counted in ``mailbus_webhook_rejected_total`` by reason, which
``MailbusWebhooksRefused`` reads; a provider retries a 401, and one that signs each attempt
anew gets its retry through); a provider whose signature does not cover the body (Mailgun)
has its token remembered, shared by every replica, and the token seen with other event
data is a replay (401 ``replayed``); the body is parsed (400 naming the field; an item of a
batch that cannot be read is counted as ``invalid`` in ``mailbus_webhook_ignored_total``
and the rest kept); an SNS subscription confirmation is confirmed (200 ``subscribed``);
every delivery event is recorded as the ``Mailbus-Signature`` route records it
(:mod:`mailbus.feedback.store`: once per provider and event id, so a replay changes nothing
and counts as ``duplicate``; an ``unknown`` send the event names by its dedupe key is
settled first, ``settled``). The answer counts the request's events by result. A storage
failure, or an SNS certificate that cannot be fetched, is 503 (the provider retries).
Client input never answers 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from aiohttp import web

from mailbus.feedback.events import DeliveryEvent, InvalidEventError
from mailbus.feedback.native import mailgun_events, postmark_events, sns
from mailbus.feedback.native.certificates import CertificateSource, FetchError
from mailbus.feedback.native.inbound import MAX_DEPTH, Inbound, too_deep
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
    "read_body",
]

log = logging.getLogger("mailbus.webhooks")

Clock = Callable[[], float]


KIB, MIB = 1024, 1024 * 1024


class NativeReceiver(Protocol):
    name: str
    max_body: int  # bytes

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict: ...

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        """A verified body's one-time signature token and the digest of what it signs for,
        when the signature does not cover the body (Mailgun); else None."""
        ...

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound: ...


class _Recorder(Protocol):
    async def record(self, provider: str, event: DeliveryEvent) -> Recorded: ...

    async def remember_token(self, provider: str, token: str, digest: bytes) -> bool: ...


class _BodySigned:
    """A provider whose signature covers the body: no token to remember."""

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        return None


class Mailgun:
    name = "mailgun"
    max_body = 1 * MIB  # one event per post

    def __init__(self, key: str, clock: Clock = time.time) -> None:
        self._key, self._clock = key, clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return mailgun_events.verify(body, self._key, self._clock())

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        return mailgun_events.token(body)

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return mailgun_events.parse(body)


class Resend(_BodySigned):
    name = "resend"
    max_body = 1 * MIB  # one event per post

    def __init__(self, secret: str, clock: Clock = time.time) -> None:
        from mailbus.feedback.native import resend_events  # svix: the [resend] extra

        self._events = resend_events
        self._hook = resend_events.signing_hook(secret)
        self._clock = clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return self._events.verify(headers, body, self._hook, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return self._events.parse(headers, body)


class SendGrid(_BodySigned):
    name = "sendgrid"
    max_body = 8 * MIB  # up to MAX_EVENTS (10,000) events of well under 1 KiB each

    def __init__(self, public_key: str, clock: Clock = time.time) -> None:
        self._verifier, self._clock = Verifier(public_key), clock

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return self._verifier.verify(headers, body, self._clock())

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return parse_sendgrid(body)


class Postmark(_BodySigned):
    name = "postmark"
    # one record; a bounce may carry the message's content (Postmark takes up to 10 MB)
    max_body = 16 * MIB

    def __init__(self, credentials: str) -> None:
        self._credentials = credentials

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict:
        return postmark_events.verify(headers.get("Authorization"), self._credentials)

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound:
        return postmark_events.parse(body)


class Ses(_BodySigned):
    """SES through SNS: only the ``topic_arns`` given; certificates from ``source``."""

    name = "ses"
    max_body = 1 * MIB  # an SNS message is at most 256 KiB, escaped once more in JSON

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
        body = await read_body(request, receiver.max_body)
        if body is None:
            metrics.observe_webhook_rejected("too_large")
            return _answer(413, error=f"body larger than {receiver.max_body} bytes")
        if too_deep(body):
            metrics.observe_webhook_rejected("too_deep")
            return _answer(400, error=f"body: nests deeper than {MAX_DEPTH} levels")
        try:
            verdict = await receiver.verify(request.headers, body)
        except FetchError as exc:
            log.warning("webhook from %s not verified: %s", name, exc)
            return _answer(503, {"Retry-After": "5"}, error="signing certificate unavailable")
        if not verdict.ok:
            metrics.observe_webhook_rejected(verdict.reason)
            log.warning("webhook from %s refused: %s", name, verdict.reason)
            return _answer(401, error=f"not verified as {name}: {verdict.reason}")
        try:
            fresh = await _first_use(store, name, receiver.token(body))
        except StorageError as exc:
            log.error("webhook token from %s not remembered: %s", name, exc)
            return _answer(503, {"Retry-After": "5"}, error="storage unavailable, retry")
        if not fresh:
            metrics.observe_webhook_rejected("replayed")
            log.warning("webhook from %s refused: its token came with other events", name)
            return _answer(401, error=f"not verified as {name}: replayed")
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
        if inbound.invalid:
            metrics.observe_webhook_ignored(name, "invalid", inbound.invalid)
            log.warning("%d unreadable events from %s ignored", inbound.invalid, name)
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
        settled = sum(outcome.settled for outcome in recorded)
        if settled:
            metrics.observe_webhook_settled(name, settled)
            log.info("%d unknown sends settled as accepted by %s's events", settled, name)
        result = "duplicate" if counts["duplicate"] == len(recorded) and recorded else "stored"
        if not recorded:
            result = "ignored"
        return _answer(
            200,
            result=result,
            **counts,
            ignored=inbound.skipped,
            invalid=inbound.invalid,
            suppressed=suppressed,
            settled=settled,
        )

    return receive


async def _first_use(store: _Recorder, name: str, token: tuple[str, bytes] | None) -> bool:
    return token is None or await store.remember_token(name, *token)


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The request's body, or None when it is longer than ``limit`` bytes (read no further
    than that, whatever Content-Length says)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * KIB):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(code: int, headers: dict[str, str] | None = None, /, **fields: object) -> web.Response:
    return web.json_response(fields, status=code, headers=headers)
