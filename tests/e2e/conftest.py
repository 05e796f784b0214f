"""End-to-end fixtures: the sandbox email API, and mailbus processes started for real
(tests/e2e_stack.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_stack import API_KEY, Stack

from mailbus.kernel.settings import Settings
from mailbus.sandbox.server import start_in_thread


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1)
    deployed = Stack(settings, sandbox, tmp_path)
    try:
        yield deployed
    finally:
        deployed.stop_all()
        sandbox.stop()
        time.sleep(0)  # let the sandbox thread finish closing
