"""KEDA does not scale consumers out into a provider outage (issue 22, item 9): each
rendered ScaledObject's Prometheus query, evaluated by promtool, is the priority's lag
while its breaker is closed and nothing (zero) while it is open or half-open."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _validate_sh(function: str) -> list[str]:
    """A tool as `make validate` finds it (stack/validate.sh fetches it once into the cache)."""
    found = subprocess.run(
        ["bash", "-c", f"source stack/validate.sh && {function}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.split()


@pytest.fixture(scope="module")
def triggers() -> dict[str, dict[str, Any]]:
    built = subprocess.run(
        [*_validate_sh("kustomize_path"), "k8s/overlays/prod"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    scalers = [d for d in yaml.safe_load_all(built.stdout) if d and d["kind"] == "ScaledObject"]
    return {d["spec"]["scaleTargetRef"]["name"]: d["spec"]["triggers"] for d in scalers}


def _series(priority: str, other: str, breaker: str) -> list[dict[str, str]]:
    component = f'app_kubernetes_io_component="consumer-{priority}"'
    return [
        {
            "series": f'mailbus_consumer_lag{{topic="mailbus.send.{priority}", partition="0",'
            f' {component}, pod="a"}}',
            "values": "3000x10",
        },
        {
            "series": f'mailbus_consumer_lag{{topic="mailbus.send.{priority}", partition="1",'
            f' {component}, pod="b"}}',
            "values": "2000x10",
        },
        {
            "series": f'mailbus_breaker_state{{provider="http", {component}, pod="a"}}',
            "values": breaker,
        },
        {  # this priority's fallback's breaker, open all along (its key revoked): the
            # primary takes the mail and pauses nothing (docs/providers.md#the-fallback-provider)
            "series": f'mailbus_breaker_state{{provider="fallback:postmark", {component},'
            f' pod="a"}}',
            "values": "2x10",
        },
        {  # another priority's breaker, open all along: none of this priority's business
            "series": f'mailbus_breaker_state{{provider="http",'
            f' app_kubernetes_io_component="consumer-{other}", pod="c"}}',
            "values": "2x10",
        },
    ]


@pytest.mark.parametrize("priority", ["p0", "p1", "p2"])
def test_the_trigger_scales_on_lag_only_while_the_breaker_is_closed(
    triggers: dict[str, dict[str, Any]], priority: str, tmp_path: Path
) -> None:
    [trigger] = triggers[f"mailbus-consumer-{priority}"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["ignoreNullValues"] == "true"  # empty means 0: scale in
    query = trigger["metadata"]["query"]
    other = "p2" if priority != "p2" else "p0"
    # minutes 0-3 closed, 4-6 open, 7-8 half-open, 9-10 closed again
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(priority, other, "0 0 0 0 2 2 2 1 1 0 0"),
                "promql_expr_test": [
                    {"expr": query, "eval_time": "2m", "exp_samples": [{"value": 5000}]},
                    {"expr": query, "eval_time": "5m", "exp_samples": []},
                    {"expr": query, "eval_time": "8m", "exp_samples": []},
                    {"expr": query, "eval_time": "10m", "exp_samples": [{"value": 5000}]},
                ],
            },
            {  # no breaker reported yet (a consumer just started): lag still counts
                "interval": "1m",
                "input_series": _series(priority, other, "_x10"),
                "promql_expr_test": [
                    {"expr": query, "eval_time": "2m", "exp_samples": [{"value": 5000}]}
                ],
            },
        ],
    }
    path = tmp_path / "trigger_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    [promtool] = _validate_sh("promtool_path")
    run = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
