"""Readiness that tells the truth (review 2026-12-06 hole 16): a heartbeat that stops makes
its component unready, and a probe is asked at every question, its failure named."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mailbus.kernel import health


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(health, "_components", {})
    monkeypatch.setattr(health, "_probes", {})
    yield


def test_a_component_whose_heartbeat_stopped_is_not_ready() -> None:
    health.mark("relay", True, heartbeat_s=30)
    health.mark("kafka", True)  # no heartbeat: ready until marked otherwise
    now = time.monotonic()
    assert health.readiness(lambda: now + 29)[0]
    ready, components = health.readiness(lambda: now + 31)
    assert not ready
    assert components["relay"] == {"ready": False, "detail": "no heartbeat for 31 s"}
    assert components["kafka"]["ready"]


def test_a_probe_is_asked_and_its_failure_named() -> None:
    health.mark("relay", True)
    answers = iter([(True, ""), (False, "no round trip: timeout")])
    health.probe("database round trip", lambda: next(answers))
    assert health.readiness()[0]
    ready, components = health.readiness()
    assert not ready
    assert components["database round trip"]["detail"] == "no round trip: timeout"

    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    health.probe("database round trip", broken)
    ready, components = health.readiness()
    assert not ready and components["database round trip"]["detail"] == "RuntimeError: boom"
    health.probe("database round trip", None)
    assert health.readiness()[0]
