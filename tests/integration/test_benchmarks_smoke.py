"""Every benchmark of bench/report.py runs, at a size of seconds, so one that hangs or
breaks (as bench/webhooks.py once waited for a line `mailbus webhooks` no longer printed)
fails `make test` instead of the next report; so do those bench/compare.py runs beyond
the report's, and bench/timeline.py (docs/benchmarks/speed.md's stages). Figures are
recorded, never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from services import StackServices

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from compare_doc import BENCHES  # noqa: E402
from report import SPECS  # noqa: E402

# Scripts outside the report, at a size of seconds. bench/relay_lane_parts.py broke
# unnoticed when the relay's pass took a new argument (every P0 row "not seen").
OUTSIDE_THE_REPORT = {
    "relay_lane_parts.py": ("--rate", "20", "--seconds", "2", "--runs", "1", "--backlog", "2000"),
    "timeline.py": ("--rate", "20", "--seconds", "2"),
}


def _run(argv: list[str], services: StackServices) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *argv],
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
    return done


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_benchmark_runs_at_smoke_size(name: str, services: StackServices) -> None:
    done = _run(["report.py", "--smoke", "--only", name], services)
    assert f"[smoke] {name}:" in done.stdout


def test_every_benchmark_compare_runs_is_smoke_tested() -> None:
    compared = {script for script, _ in BENCHES.values()}
    reported = {spec.script for spec in SPECS.values()}
    assert compared - reported <= set(OUTSIDE_THE_REPORT)


@pytest.mark.parametrize("script", sorted(OUTSIDE_THE_REPORT))
def test_a_benchmark_outside_the_report_runs_at_smoke_size(
    script: str, services: StackServices
) -> None:
    _run([script, *OUTSIDE_THE_REPORT[script]], services)
