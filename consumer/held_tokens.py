"""Tokens a process took from a bucket shared in PostgreSQL, spent one per send.

The global rate limit (``mailbus.consumer.rate_limit``) and the recovery cap
(``mailbus.consumer.recovery_pacer``) both keep their bucket in one database row and take a few
tokens per UPDATE, so the database sees a few small updates a second whatever the send
rate. This is their common part: a send spends a held token, and only when none is held
is the bucket asked again, by one waiting send at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["HeldTokens", "Take"]

# Takes tokens from the shared bucket: (granted, seconds to wait when none was), or None
# when there is no limit right now (the send goes out without a token).
Take = Callable[[], Awaitable[tuple[int, float] | None]]


class HeldTokens:
    def __init__(self) -> None:
        self._held = 0
        self._lock = asyncio.Lock()

    async def spend(self, take: Take) -> None:
        """Wait until one send may go out: spend a held token, taking more while none is."""
        async with self._lock:
            while self._held == 0:
                taken = await take()
                if taken is None:
                    return
                granted, wait_s = taken
                self._held += granted
                if granted == 0:
                    await asyncio.sleep(wait_s)
            self._held -= 1

    def drop(self) -> None:
        """Forget the tokens held (a new bucket: the recovery ramp restarted)."""
        self._held = 0
