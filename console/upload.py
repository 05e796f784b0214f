"""An uploaded CSV streamed to the campaign importer while it arrives.

The importer (:func:`mailbus.campaigns.store.create_campaign`) reads a blocking binary
stream in a worker thread; the request handler reads the upload's chunks on the event loop
and hands them over through a small bounded queue, so neither side holds the whole file and
a slow database slows the upload down instead of filling memory.
"""

from __future__ import annotations

import asyncio
import io
import queue
from collections.abc import AsyncIterator

__all__ = ["ChunkStream", "feed"]

_END = b""


class ChunkStream(io.RawIOBase):
    """A readable binary stream over chunks put by another thread (``b""`` ends it)."""

    def __init__(self, depth: int = 8) -> None:
        self.chunks: queue.Queue[bytes] = queue.Queue(maxsize=depth)
        self._left = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._left and not self._ended:
            chunk = self.chunks.get()
            self._ended = chunk == _END
            self._left = chunk
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def drain(self) -> None:
        """Read and drop what is left (the importer stopped early: unblock the feeder)."""
        while not self._ended:
            self._ended = self.chunks.get() == _END


async def feed(stream: ChunkStream, chunks: AsyncIterator[bytes]) -> int:
    """Put every chunk of ``chunks`` into ``stream``, then its end; the bytes fed."""
    size = 0
    try:
        async for chunk in chunks:
            if chunk:
                size += len(chunk)
                await asyncio.to_thread(stream.chunks.put, chunk)
    finally:
        await asyncio.to_thread(stream.chunks.put, _END)
    return size
