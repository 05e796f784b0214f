"""A relay running in a thread of the test process, and waiting for what it does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mailbus.kernel.settings import Settings
from mailbus.relay.relay import Relay

__all__ = ["relay_thread", "wait_until"]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def relay_thread(settings: Settings) -> Iterator[Relay]:
    stop = threading.Event()
    relay = Relay(settings)
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
