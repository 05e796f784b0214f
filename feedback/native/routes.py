"""``POST /webhooks/<provider>``: each enabled provider's own route, an aiohttp adapter over
the :class:`NativeReceiver` each provider folder gives (``providers/<name>/webhook.py``,
found through :mod:`mailbus.providers.registry`).

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from aiohttp import web

from mailbus.feedback.events import DeliveryEvent, InvalidEventError
from mailbus.feedback.native.inbound import MAX_DEPTH, Inbound, too_deep
from mailbus.feedback.signature import Verdict
from mailbus.feedback.store import Recorded
from mailbus.kernel import metrics
from mailbus.kernel.errors import MailbusError, StorageError

__all__ = [
    "MIB",
    "BodySigned",
    "Clock",
    "NativeReceiver",
    "Unreachable",
    "add_native_routes",
    "read_body",
]

log = logging.getLogger("mailbus.webhooks")

Clock = Callable[[], float]


KIB, MIB = 1024, 1024 * 1024


class Unreachable(MailbusError):
    """What a receiver needs to verify or confirm could not be reached (an SNS signing
    certificate, a subscription URL): 503, and the provider retries."""


class NativeReceiver(Protocol):
    """One provider's webhook route: ``name`` is its path, ``/webhooks/<name>``."""

    name: str
    max_body: int  # bytes
    # how long its tokens are remembered (see ``token``); 0: it has none
    tokens_kept_s: float

    async def verify(self, headers: Mapping[str, str], body: bytes) -> Verdict: ...

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        """A verified body's one-time signature token and the digest of what it signs for,
        when the signature does not cover the body (Mailgun); else None."""
        ...

    async def parse(self, headers: Mapping[str, str], body: bytes) -> Inbound: ...

    async def close(self) -> None:
        """Release what it holds (an SNS certificate source's HTTP session)."""
        ...


class _Recorder(Protocol):
    async def record(self, provider: str, event: DeliveryEvent) -> Recorded: ...

    async def remember_token(self, provider: str, token: str, digest: bytes) -> bool: ...


class BodySigned:
    """A provider whose signature covers the body: no token to remember."""

    tokens_kept_s = 0.0

    def token(self, body: bytes) -> tuple[str, bytes] | None:
        return None

    async def close(self) -> None:
        return None


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
        except Unreachable as exc:
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
        except Unreachable as exc:
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
