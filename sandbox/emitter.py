"""The sandbox sends signed delivery events for what it accepted (``--events-to URL``).

Each newly accepted message gets its events (:mod:`mailbus.sandbox.outcomes`) posted to the
receiver after ``delay_ms``, signed with ``Mailbus-Signature`` (v2: over the URL's path and
the body) under the webhook secret.
A post answered 5xx or lost on the way is retried (up to 5 times, 0.5 s doubling); 4xx is
not (the receiver refused it: a wrong secret, a bad body). Counts of sent, refused and
failed events are served at ``GET /_sandbox/events``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from mailbus.feedback.signature import signature_header
from mailbus.kernel.errors import ConfigError
from mailbus.sandbox.outcomes import OutcomePlan, outcome_events

__all__ = ["EventEmitter", "add_event_arguments", "emitter_from_args"]

log = logging.getLogger("mailbus.sandbox.events")

_ATTEMPTS = 5


def add_event_arguments(parser: argparse.ArgumentParser) -> None:
    """``mailbus sandbox``'s delivery-event options."""
    events = parser.add_argument_group(
        "delivery events",
        "with --events-to, every newly accepted message gets signed delivery events "
        "(secret: $MAILBUS_WEBHOOK_SECRET or its _FILE)",
    )
    events.add_argument(
        "--events-to", metavar="URL", help="e.g. http://127.0.0.1:8026/webhooks/sandbox"
    )
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


def emitter_from_args(args: argparse.Namespace) -> EventEmitter | None:
    """The emitter ``--events-to`` asks for, or None; a missing secret is a ConfigError."""
    url = getattr(args, "events_to", None)
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ConfigError("--events-to", f"expected an http(s):// URL, got {url!r}")
    secret = os.environ.get("MAILBUS_WEBHOOK_SECRET", "").strip()
    if path := os.environ.get("MAILBUS_WEBHOOK_SECRET_FILE"):
        try:
            secret = Path(path).read_text().strip()
        except OSError as exc:
            problem = f"unreadable: {exc.strerror}"
            raise ConfigError("MAILBUS_WEBHOOK_SECRET_FILE", problem) from None
    if not secret:
        raise ConfigError("MAILBUS_WEBHOOK_SECRET", "--events-to needs the webhook secret")
    plan = OutcomePlan(
        delay_ms=args.events_delay_ms,
        bounce_share=args.bounce_share,
        hard_share=args.hard_share,
        complaint_share=args.complaint_share,
    )
    return EventEmitter(url, secret, plan, seed=args.seed)


class EventEmitter:
    def __init__(
        self,
        url: str,
        secret: str,
        plan: OutcomePlan,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self._path = urlsplit(url).path  # the signature covers it, as the receiver sees it
        self._secret = secret
        self.plan = plan
        self._rng = random.Random(seed)
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts = {"sent": 0, "refused": 0, "failed": 0}

    def accepted(self, message_id: str) -> None:
        """Schedule the events of a newly accepted message (call on the sandbox's loop)."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        events = outcome_events(message_id, self.plan, self._rng, now)
        task = asyncio.get_running_loop().create_task(self._emit(events))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def snapshot(self) -> dict[str, Any]:
        return {"url": self.url, "pending": len(self._tasks), **self.counts}

    async def close(self) -> None:
        """Cancel what is not sent yet; close the client."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()

    async def _emit(self, events: list[dict[str, Any]]) -> None:
        await asyncio.sleep(self.plan.delay_ms / 1000)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        for event in events:
            self.counts[await self._post(self._session, event)] += 1

    async def _post(self, session: aiohttp.ClientSession, event: dict[str, Any]) -> str:
        body = json.dumps(event).encode()
        pause = 0.5
        for attempt in range(1, _ATTEMPTS + 1):
            header = signature_header(self._secret, self._path, body, int(self._clock()))
            try:
                async with session.post(
                    self.url,
                    data=body,
                    headers={"Mailbus-Signature": header, "Content-Type": "application/json"},
                ) as response:
                    if response.status < 300:
                        return "sent"
                    if response.status < 500:
                        log.warning("event %s refused: HTTP %d", event["id"], response.status)
                        return "refused"
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("event %s not delivered (attempt %d): %s", event["id"], attempt, exc)
            if attempt < _ATTEMPTS:
                await asyncio.sleep(pause)
                pause *= 2
        return "failed"
