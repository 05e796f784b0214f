"""Retention runs by itself (docs/retention.md#scheduling): every rendered overlay ships the
hourly CronJob, never two runs at once, its budget inside the Job's deadline, under the
house rules every other pod meets."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from k8s_render import kustomize_command, render

from mailbus.kernel.durations import parse_duration

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(path.name for path in (REPO / "k8s/overlays").iterdir() if path.is_dir())
_spec = importlib.util.spec_from_file_location("check_manifests", REPO / "stack/check_manifests.py")
assert _spec is not None and _spec.loader is not None
check_manifests = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("check_manifests", check_manifests)
_spec.loader.exec_module(check_manifests)


@pytest.fixture(scope="module")
def kustomize() -> list[str]:
    return kustomize_command()


def cronjob(kustomize: list[str], overlay: str) -> dict[str, Any]:
    [found] = [
        doc for doc in render(kustomize, f"k8s/overlays/{overlay}") if doc["kind"] == "CronJob"
    ]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_runs_retention_hourly_one_at_a_time(
    kustomize: list[str], overlay: str
) -> None:
    job = cronjob(kustomize, overlay)
    assert job["metadata"]["name"] == "mailbus-retention"
    spec = job["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["schedule"].split()[1:] == ["*", "*", "*", "*"]  # every hour
    job_spec = spec["jobTemplate"]["spec"]
    [container] = job_spec["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["retention", "run"]
    budget_s = parse_duration(args[args.index("--budget") + 1], "--budget")
    assert budget_s < job_spec["activeDeadlineSeconds"] <= 3600  # done before the next one
    assert job_spec["backoffLimit"] == 0  # behind (exit 3): the next hour goes on
    assert check_manifests._house_rules(job) == []


def test_the_house_rules_reach_a_cronjobs_pod(kustomize: list[str]) -> None:
    job = copy.deepcopy(cronjob(kustomize, OVERLAYS[0]))
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["containers"][0]["resources"].pop("limits")
    pod["securityContext"].pop("runAsUser")
    problems = check_manifests._house_rules(job)
    assert any("memory limit" in p for p in problems) and any("numeric" in p for p in problems)
