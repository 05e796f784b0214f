"""`mailbus status` of a consumer with a fallback provider: the fallback's own breaker
(docs/providers.md#the-fallback-provider) is in ``provider_health`` next to the primary's,
so the runbook's "check `mailbus status`" shows it when its alert fires."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from services import REPO, run_mailbus, settings_env

from mailbus.kernel.settings import Settings

PRIMARY = "http://127.0.0.1:9/primary"
FALLBACK = "http://127.0.0.1:9/fallback"


def test_status_shows_the_fallbacks_breaker_next_to_the_primarys(
    settings: Settings, tmp_path: Path
) -> None:
    env = settings_env(
        settings,
        MAILBUS_PROVIDER_URL=PRIMARY,
        MAILBUS_FALLBACK_PROVIDER="http",
        MAILBUS_FALLBACK_PROVIDER_URL=FALLBACK,
    )
    with (tmp_path / "consume.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mailbus", "consume", "--priority", "p1"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        providers: set[str] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(providers) < 2:
            assert process.poll() is None, (tmp_path / "consume.log").read_text()
            shown = run_mailbus("status", "--json", env=env)
            assert shown.returncode == 0, shown.stderr
            breakers = json.loads(shown.stdout)["breakers"] or []
            providers = {breaker["provider"] for breaker in breakers}
            time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(60)
    assert providers == {PRIMARY, f"fallback:{FALLBACK}"}, providers
