"""The event loop of mailbus's asyncio processes: `mailbus consume`, `mailbus webhooks` and
`mailbus console`.

``MAILBUS_EVENT_LOOP=uvloop`` (the default) runs them on uvloop, whose loop and sockets are
written in C: the consumer spends a sizeable share of its CPU per mail in the event loop and
the HTTP client's protocol callbacks (docs/benchmarks/speed.md). ``asyncio`` runs Python's
own loop, for debugging or where uvloop cannot be installed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["EVENT_LOOPS", "run"]

EVENT_LOOPS = ("uvloop", "asyncio")
_T = TypeVar("_T")


def run(main: Coroutine[Any, Any, _T], event_loop: str) -> _T:
    """Run ``main`` to completion on a new loop of the kind ``event_loop`` names."""
    with asyncio.Runner(loop_factory=_loop_factory(event_loop)) as runner:
        return runner.run(main)


def _loop_factory(event_loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if event_loop == "uvloop":
        import uvloop  # only here: `MAILBUS_EVENT_LOOP=asyncio` runs without it

        return uvloop.new_event_loop
    if event_loop == "asyncio":
        return None  # asyncio.Runner's default: a new loop of the running policy
    raise ValueError(f"unknown event loop {event_loop!r}")
