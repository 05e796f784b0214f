"""The readiness probe's bound on its whole check (mailbus/app/database_probe.py): a check
that does not answer in time is "not ready", and while it still waits the next probes
await it instead of starting another (one database connection at most)."""

from __future__ import annotations

import threading

import pytest

from mailbus.app.database_probe import within


def test_a_check_still_waiting_is_not_ready_and_not_started_again() -> None:
    released = threading.Event()
    calls: list[int] = []

    def check() -> tuple[bool, str]:
        calls.append(1)
        released.wait(10)
        return True, ""

    probe = within(check, 0.05)
    assert probe() == (False, "no answer within 0.05 s")
    assert probe() == (False, "no answer within 0.05 s")
    assert len(calls) == 1  # the second probe awaited the first check
    released.set()
    assert within(check, 5)() == (True, "")
    assert probe() == (True, "")  # the first check done, a new one


def test_a_check_that_raises_is_reported_by_its_caller() -> None:
    def check() -> tuple[bool, str]:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        within(check, 5)()
