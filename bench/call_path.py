"""A provider adapter's call path alone: ``in_flight`` senders kept busy through one
adapter for ``seconds`` after a 1 s warm-up, every send accepted; sends/s. Shared by the
adapter and SMTP benchmarks; :func:`send_accepted` by the PgQueuer peer too."""

from __future__ import annotations

import asyncio
import itertools
import time

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core.outcome import Outcome
from mailbus.consumer.core.smtp_outcome import classify_call
from mailbus.consumer.provider import OutgoingMail

__all__ = ["send_accepted", "sends_per_second"]


async def send_accepted(provider: Provider, mail: OutgoingMail) -> None:
    """Send ``mail`` as the consumer does (prepared, sent, the result classified); raises
    unless the provider accepted it."""
    result = classify_call(await provider.send(provider.prepare(mail)))
    if result.outcome is not Outcome.ACCEPTED:
        raise RuntimeError(f"{mail.key}: not accepted: {result.reason}")


async def sends_per_second(provider: Provider, in_flight: int, seconds: float, name: str) -> float:
    keys = itertools.count()
    sent = 0

    async def sender(until: float, count: bool) -> None:
        nonlocal sent
        while time.monotonic() < until:
            mail = OutgoingMail(f"{name}-{next(keys)}", "u@example.com", "welcome", {"n": 1})
            await send_accepted(provider, mail)
            sent += count

    await asyncio.gather(*(sender(time.monotonic() + 1, False) for _ in range(in_flight)))
    started = time.monotonic()
    await asyncio.gather(*(sender(started + seconds, True) for _ in range(in_flight)))
    return sent / (time.monotonic() - started)
