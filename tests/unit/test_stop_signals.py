"""mailbus/kernel/signals.py: a SIGTERM that arrives between two calls of stop_on_signals
(the start-up schema check's, then the relay's own) is not lost. It was: the relay of
test_two_relays_share_a_backlog, signalled while it started, ran on for ever."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_signal_between_two_calls_stops_the_process() -> None:
    script = (
        "import os, signal\n"
        "from mailbus.kernel.signals import stop_on_signals\n"
        "first = stop_on_signals()\n"
        "os.kill(os.getpid(), signal.SIGTERM)  # while it starts, after the first call\n"
        "second = stop_on_signals()\n"
        "print(second.wait(2))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_every_call_gives_the_one_event() -> None:
    script = (
        "from mailbus.kernel.signals import stop_on_signals\n"
        "print(stop_on_signals() is stop_on_signals())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert done.stdout.strip() == "True", done.stderr
