"""The sandbox sends signed delivery events for what it accepted.

``--events-to URL``: each newly accepted message gets its events
(:mod:`mailbus.sandbox.outcomes`) posted to the receiver after ``delay_ms``, signed with
``Mailbus-Signature`` (v2: over the URL's path and the body) under the webhook secret.
``--native-events-to URL``: mail a named provider's dialect accepted gets that provider's
own events instead (each provider folder's ``sandbox/``), posted to ``URL/<provider>``
(the receiver's route, docs/providers.md#delivery-events) and signed that provider's way,
for each provider whose signing secret or key is given (the receiver's variables:
``MAILBUS_RESEND_WEBHOOK_SECRET``, ``MAILBUS_MAILGUN_WEBHOOK_KEY``,
``MAILBUS_POSTMARK_WEBHOOK_AUTH``, each with ``_FILE``; SendGrid's and SNS's private keys
as PEM files). SES mail is sent elsewhere (SES itself, or moto): :meth:`EventEmitter.accepted`
with ``dialect="ses"`` publishes its events as SNS would.
A ``duplicate_share`` of events is posted twice, as providers deliver at least once.
A post answered 5xx or lost on the way is retried (up to 5 times, 0.5 s doubling), signed
anew; 4xx is not (the receiver refused it: a wrong secret, a bad body). Counts of sent,
duplicate (the receiver had it already), refused and failed events are served at
``GET /_sandbox/events``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from mailbus.kernel.errors import ConfigError
from mailbus.providers.sandbox.events import MailbusSigner, Signer, secret_from_env
from mailbus.sandbox.imitations import imitations
from mailbus.sandbox.outcomes import OutcomePlan, outcome_events, posting_order

__all__ = ["EventEmitter", "Route", "add_event_arguments", "emitter_from_args"]

log = logging.getLogger("mailbus.sandbox.events")

_ATTEMPTS = 5


@dataclass(frozen=True)
class Route:
    """Where one dialect's events go and how they are signed."""

    url: str
    signer: Signer


def add_event_arguments(parser: argparse.ArgumentParser) -> None:
    """``mailbus sandbox``'s delivery-event options."""
    events = parser.add_argument_group(
        "delivery events",
        "with --events-to, every newly accepted message gets signed delivery events "
        "(secret: $MAILBUS_WEBHOOK_SECRET or its _FILE); with --native-events-to, mail of a "
        "named provider's dialect gets that provider's own events, for each provider whose "
        "secret is set ($MAILBUS_RESEND_WEBHOOK_SECRET, $MAILBUS_MAILGUN_WEBHOOK_KEY, "
        "$MAILBUS_POSTMARK_WEBHOOK_AUTH, each or its _FILE) or key given (below)",
    )
    events.add_argument(
        "--events-to", metavar="URL", help="e.g. http://127.0.0.1:8026/webhooks/sandbox"
    )
    events.add_argument(
        "--native-events-to",
        metavar="URL",
        help="the receiver's webhooks base, e.g. http://127.0.0.1:8026/webhooks: a provider's "
        "events go to URL/<provider>",
    )
    for imitation in imitations().values():  # a provider's own signing options
        if imitation.options is not None:
            imitation.options(events)
    events.add_argument(
        "--events-delay-ms",
        metavar="MS",
        type=_delay_arg,
        default=200.0,
        help="after acceptance (200)",
    )
    events.add_argument(
        "--bounce-share", metavar="F", type=_share_arg, default=0.0, help="of accepted (0)"
    )
    events.add_argument(
        "--hard-share", metavar="F", type=_share_arg, default=0.5, help="of bounces (0.5)"
    )
    events.add_argument(
        "--complaint-share", metavar="F", type=_share_arg, default=0.0, help="of delivered (0)"
    )
    events.add_argument(
        "--duplicate-share",
        metavar="F",
        type=_share_arg,
        default=0.0,
        help="of events, posted twice (0)",
    )


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return value


def _delay_arg(text: str) -> float:
    return _number(text)


def _share_arg(text: str) -> float:
    value = _number(text)
    if value > 1:
        raise argparse.ArgumentTypeError("must be within 0..1")
    return value


def _http_url(option: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(option, f"expected an http(s):// URL, got {url!r}")
    return url


def _native_signers(args: argparse.Namespace) -> dict[str, Signer]:
    """The providers whose signing secret or key is configured, with their signers (each
    provider folder's imitation reads its own)."""
    signers: dict[str, Signer] = {}
    for name, imitation in imitations().items():
        signer = None if imitation.signer is None else imitation.signer(args)
        if signer is not None:
            signers[name] = signer
    return signers


def emitter_from_args(args: argparse.Namespace) -> EventEmitter | None:
    """The emitter ``--events-to``/``--native-events-to`` ask for, or None; a missing
    secret is a ConfigError."""
    url = getattr(args, "events_to", None)
    native_base = getattr(args, "native_events_to", None)
    if not url and not native_base:
        return None
    secret = ""
    if url:
        _http_url("--events-to", url)
        secret = secret_from_env("MAILBUS_WEBHOOK_SECRET")
        if not secret:
            raise ConfigError("MAILBUS_WEBHOOK_SECRET", "--events-to needs the webhook secret")
    native: dict[str, Route] = {}
    if native_base:
        base = _http_url("--native-events-to", native_base).rstrip("/")
        signers = _native_signers(args)
        if not signers:
            problem = "no provider's signing secret or key is set (see --help)"
            raise ConfigError("--native-events-to", problem)
        native = {name: Route(f"{base}/{name}", signer) for name, signer in signers.items()}
    plan = OutcomePlan(
        delay_ms=args.events_delay_ms,
        bounce_share=args.bounce_share,
        hard_share=args.hard_share,
        complaint_share=args.complaint_share,
        duplicate_share=args.duplicate_share,
    )
    return EventEmitter(url or None, secret, plan, seed=args.seed, native=native)


class EventEmitter:
    """Posts the events of accepted mail: to ``url`` signed with ``Mailbus-Signature``
    (None: nowhere), or for a dialect in ``native`` to its own route, its own way."""

    def __init__(
        self,
        url: str | None,
        secret: str,
        plan: OutcomePlan,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
        native: Mapping[str, Route] | None = None,
    ) -> None:
        self.url = url
        # the signature covers the path, as the receiver sees it
        self._own = None if url is None else Route(url, MailbusSigner(secret, urlsplit(url).path))
        self.native = dict(native or {})
        self.plan = plan
        self._rng = random.Random(seed)
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts = {"sent": 0, "duplicate": 0, "refused": 0, "failed": 0}

    def accepted(self, message_id: str, to: str = "", dialect: str = "mailbus") -> None:
        """Schedule the events of a message newly accepted through ``dialect`` (call on the
        sandbox's loop); nothing when no route takes that dialect's events."""
        route = self.native.get(dialect, self._own)
        if route is None:
            return
        now = datetime.fromtimestamp(self._clock(), UTC)
        events = outcome_events(message_id, self.plan, self._rng, now)
        events = posting_order(events, self.plan, self._rng)
        task = asyncio.get_running_loop().create_task(self._emit(route, events, to))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def snapshot(self) -> dict[str, Any]:
        native = {name: route.url for name, route in self.native.items()}
        return {"url": self.url, "native": native, "pending": len(self._tasks), **self.counts}

    async def close(self) -> None:
        """Cancel what is not sent yet; close the client."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()

    async def _emit(self, route: Route, events: list[dict[str, Any]], to: str) -> None:
        await asyncio.sleep(self.plan.delay_ms / 1000)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        for event in events:
            self.counts[await self._post(self._session, route, event, to)] += 1

    async def _post(
        self, session: aiohttp.ClientSession, route: Route, event: dict[str, Any], to: str
    ) -> str:
        pause = 0.5
        for attempt in range(1, _ATTEMPTS + 1):
            signed = route.signer.sign(event, to, int(self._clock()))
            try:
                async with session.post(
                    route.url, data=signed.body, headers=signed.headers
                ) as response:
                    if response.status < 300:
                        return await _result(response)
                    if response.status < 500:
                        log.warning("event %s refused: HTTP %d", event["id"], response.status)
                        return "refused"
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("event %s not delivered (attempt %d): %s", event["id"], attempt, exc)
            if attempt < _ATTEMPTS:
                await asyncio.sleep(pause)
                pause *= 2
        return "failed"


async def _result(response: aiohttp.ClientResponse) -> str:
    """``duplicate`` when the receiver says it had the event already, else ``sent``."""
    try:
        answer = json.loads(await response.read())
    except ValueError:
        return "sent"
    duplicate = isinstance(answer, dict) and answer.get("result") == "duplicate"
    return "duplicate" if duplicate else "sent"
