"""A relay running in a thread of the test process, waiting for what it does, and its
processes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mailbus.kernel.settings import Settings
from mailbus.relay.relay import Relay

__all__ = ["children", "relay_thread", "running", "wait_until"]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def relay_thread(settings: Settings, **relay_args: Any) -> Iterator[Relay]:
    """A Relay (``Relay(settings, **relay_args)``: every lane by default) run in a thread."""
    stop = threading.Event()
    relay = Relay(settings, **relay_args)
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
    return found


def running(pid: int) -> bool:
    """A process that neither exited nor is a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
