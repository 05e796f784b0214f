"""The relay's and the consumer's collector setting: start-up frozen, young collections
per some batches."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Iterator

import pytest

from mailbus.app import cli
from mailbus.kernel.garbage import YOUNG_THRESHOLD, tune_collector


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector")
def test_start_up_objects_leave_the_scans_and_a_batch_of_rows_triggers_no_collection() -> None:
    built_at_start_up = [{"n": n} for n in range(1000)]
    tune_collector()
    assert gc.get_freeze_count() >= len(built_at_start_up)
    collections = gc.get_stats()[0]["collections"]
    batch = [({"send_id": n}, [n]) for n in range(2000)]  # a pointer batch's containers
    assert gc.get_stats()[0]["collections"] == collections
    assert len(batch) * 2 < YOUNG_THRESHOLD


def test_the_consumer_command_tunes_the_collector_after_its_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cli, "tune_collector", lambda: calls.append("tuned"))
    monkeypatch.setattr(cli, "_check_kafka", lambda _settings: None)
    monkeypatch.setattr("mailbus.providers.registry.senders", lambda: calls.append("senders"))
    monkeypatch.setattr(
        "mailbus.consumer.runner.run_consumer", lambda *_args: calls.append("run") or 0
    )
    settings: object = object()  # neither patched step reads it
    assert cli._consume(settings, argparse.Namespace(priority=["p1"])) == 0  # type: ignore[arg-type]
    assert calls == ["senders", "tuned", "run"]
