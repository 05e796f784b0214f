"""Every benchmark of bench/report.py runs, at a size of seconds, so one that hangs or
breaks (as bench/webhooks.py once waited for a line `mailbus webhooks` no longer printed)
fails `make test` instead of the next report. Figures are recorded, never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from services import StackServices

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from report import SPECS  # noqa: E402


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_benchmark_runs_at_smoke_size(name: str, services: StackServices) -> None:
    done = subprocess.run(
        [sys.executable, "report.py", "--smoke", "--only", name],
        cwd=BENCH,
        env={
            **os.environ,
            "MAILBUS_DATABASE_URL": services.database_url,  # each creates its own database
            "MAILBUS_KAFKA_BOOTSTRAP": services.kafka_bootstrap,
        },
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"[smoke] {name}:" in done.stdout
