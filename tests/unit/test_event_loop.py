"""MAILBUS_EVENT_LOOP: the loop `mailbus consume`, `webhooks` and `console` run on."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mailbus.kernel import event_loop
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_is_the_default() -> None:
    assert load_settings({}).event_loop == "uvloop"
    assert event_loop.run(_loop_module(), "uvloop").startswith("uvloop")


def test_asyncio_runs_pythons_own_loop() -> None:
    settings = load_settings({"MAILBUS_EVENT_LOOP": " AsyncIO "})
    assert settings.event_loop == "asyncio"
    assert event_loop.run(_loop_module(), settings.event_loop).startswith("asyncio")


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="MAILBUS_EVENT_LOOP.*uvloop or asyncio.*'trio'"):
        load_settings({"MAILBUS_EVENT_LOOP": "trio"})


def test_the_consumer_runs_on_the_configured_loop() -> None:
    """run_consumer goes through event_loop.run with the setting (its first await is on
    the loop): checked in a child process, so no loop of this one is touched."""
    code = (
        "import asyncio, sys\n"
        "from mailbus.consumer import runner\n"
        "from mailbus.kernel.settings import load_settings\n"
        "async def serve(settings, priorities):\n"
        "    return 0 if type(asyncio.get_running_loop()).__module__.startswith(sys.argv[1])"
        " else 1\n"
        "runner._serve = serve\n"
        "settings = load_settings({'MAILBUS_EVENT_LOOP': sys.argv[1]})\n"
        "sys.exit(runner.run_consumer(settings, ['p1']))\n"
    )
    for loop in ("uvloop", "asyncio"):
        done = subprocess.run([sys.executable, "-c", code, loop], timeout=60, check=False)
        assert done.returncode == 0, loop
