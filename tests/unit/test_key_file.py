"""MAILBUS_PROVIDER_API_KEY_FILE is read again when it changes: a rotated key is sent from
the next call on, mails prepared before the rotation included, without a restart."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx

from mailbus.consumer.key_file import KeyFile
from mailbus.consumer.provider import HttpProvider, OutgoingMail

MAIL = OutgoingMail("order-7", "ana@example.com", "order", {})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str) -> None:
    """Replace the file as a secret mount does: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def test_a_changed_file_is_read_at_the_next_check(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write(path, "old-key-123456\n")
    clock = Clock()
    keys = KeyFile(str(path), "old-key-123456", interval_s=1.0, clock=clock)
    write(path, "new-key-654321\n")
    assert keys.current() == "old-key-123456"  # within the interval: no stat yet
    clock.now = 1.5
    assert keys.current() == "new-key-654321"


def test_an_empty_or_missing_file_keeps_the_key_in_use(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write(path, "old-key-123456")
    clock = Clock()
    keys = KeyFile(str(path), "old-key-123456", interval_s=1.0, clock=clock)
    write(path, "")  # caught half-written
    clock.now = 2.0
    assert keys.current() == "old-key-123456"
    path.unlink()
    clock.now = 4.0
    assert keys.current() == "old-key-123456"
    write(path, "new-key-654321")
    clock.now = 6.0
    assert keys.current() == "new-key-654321"


def test_the_provider_sends_the_rotated_key(tmp_path: Path) -> None:
    path = tmp_path / "key"
    write(path, "old-key-123456")
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return httpx.Response(401, json={"error": "unauthorized"})

    async def scenario() -> str:
        provider = HttpProvider(
            "http://provider.test",
            "old-key-123456",
            1.0,
            5.0,
            2,
            transport=httpx.MockTransport(handler),
            key_file=str(path),
        )
        provider._key_file._interval_s = 0.0  # type: ignore[union-attr]
        prepared = provider.prepare(MAIL)  # encoded under the old key
        await provider.send(prepared)
        write(path, "new-key-654321")
        await provider.send(prepared)
        await provider.send(MAIL)
        result = await provider.send(provider.prepare(MAIL))
        await provider.aclose()
        return str(result)

    detail = asyncio.run(scenario())
    assert seen == ["Bearer old-key-123456"] + ["Bearer new-key-654321"] * 3
    assert "key-654321" not in detail and "key-123456" not in detail
