"""The relay's campaign pacer thread tells /readyz the truth as its lanes do (issue 35,
review 2026-12-06 hole 16): a pacer that stops coming round its loop (hung on a lock or a
black-holed database) goes stale, and one whose thread an error nobody caught ended is
unready at once, instead of ready for ever."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mailbus.campaigns import pacer
from mailbus.kernel import health


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(health, "_components", {})
    monkeypatch.setattr(health, "_probes", {})
    yield


class _OneRound:
    """A pacer that comes round once, then hangs (or dies) in its second round."""

    tick_s = 1.0

    def __init__(self, dies: bool) -> None:
        self.dies = dies

    def run(self, stop: threading.Event, on_tick: Callable[[list[Any]], None]) -> None:
        on_tick([])
        if self.dies:
            raise RuntimeError("a bug in a round")
        stop.wait()


@pytest.mark.parametrize("dies", [False, True])
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_pacer_that_stops_coming_round_is_not_ready(dies: bool) -> None:
    stop = threading.Event()
    thread = threading.Thread(
        target=pacer._pace_until_stopped, args=(_OneRound(dies), stop), daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while pacer.PACER_COMPONENT not in health.readiness()[1]:
            assert time.monotonic() < deadline, "the pacer never came round"
            time.sleep(0.01)
        if dies:  # at once
            thread.join(10)
            detail = health.readiness()[1][pacer.PACER_COMPONENT]
            assert detail == {"ready": False, "detail": "stopped: RuntimeError: a bug in a round"}
            return
        now = time.monotonic()
        assert health.readiness(lambda: now)[0]
        ready, components = health.readiness(lambda: now + pacer.PACER_HEARTBEAT_S + 1)
        assert not ready
        assert components[pacer.PACER_COMPONENT]["ready"] is False
    finally:
        stop.set()
        thread.join(10)
