"""The outcome line's fields are built only when the line is written (issue 37: a
benchmark's or an operator's consumer at WARNING pays nothing per mail for it)."""

from __future__ import annotations

import logging

import pytest

from mailbus.consumer import outcome_log
from mailbus.consumer.core import Decision, SendView, Status

ROW = SendView(7, "order-7", "ana@example.com", "t", "p1", Status.SENDING, attempts=1)
ACCEPTED = Decision(Status.ACCEPTED, None, "", message_id="msg-7")


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    fields = outcome_log.outcome_fields

    def counting(*args: object) -> dict[str, object]:
        calls.append(1)
        return fields(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(outcome_log, "outcome_fields", counting)
    return calls


def test_no_fields_are_built_below_info(built: list[int], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mailbus.consumer.outcome")
    outcome_log.log_outcome(ROW, ACCEPTED, None, 0.05)
    assert built == []
    assert caplog.records == []


def test_at_info_the_line_carries_its_fields(
    built: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mailbus.consumer.outcome")
    outcome_log.log_outcome(ROW, ACCEPTED, None, 0.05)
    assert built == [1]
    [record] = caplog.records
    assert record.getMessage() == "outcome"
    assert (record.send_id, record.status, record.latency_ms) == (7, "accepted", 50.0)  # type: ignore[attr-defined]
