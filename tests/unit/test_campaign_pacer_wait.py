"""How long the pacer waits between rounds: none when more is owed, a moment while a
campaign waits for its import's next part, otherwise the rest of the tick."""

from __future__ import annotations

from mailbus.campaigns.pacer import IMPORT_WAIT_S, TickResult, wait_after


def result(limited_by: str) -> TickResult:
    return TickResult(1, 10, 10, 0, False, limited_by)


def test_more_owed_now_means_no_wait() -> None:
    assert wait_after([result("import"), result("batch")], 1.0, 0.2) == 0.0


def test_a_campaign_waiting_for_its_import_is_ticked_again_soon() -> None:
    assert wait_after([result("rate"), result("import")], 1.0, 0.2) == IMPORT_WAIT_S
    assert abs(wait_after([result("import")], 1.0, 0.95) - 0.05) < 1e-9  # the tick's rest


def test_otherwise_the_rest_of_the_tick() -> None:
    assert wait_after([result("rate")], 1.0, 0.25) == 0.75
    assert wait_after([], 1.0, 1.5) == 0.0
