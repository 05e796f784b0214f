"""relay/standby.py: the first worker to take a notification answers it; the others pass it
by while the answer is fresh; a notification without a name is answered by each."""

from __future__ import annotations

from mailbus.relay.standby import FRESH_S, REMEMBERED, Standby


def test_a_named_notification_is_answered_once() -> None:
    standby = Standby()
    assert standby.answer("7301@1796605597505000")  # the first worker to take it claims
    assert not standby.answer("7301@1796605597505000")  # the second passes it by
    assert standby.answer("7302@1796605597506000")  # the next transaction's is answered


def test_a_notification_without_a_name_is_answered_by_each() -> None:
    standby = Standby()
    assert standby.answer("")  # a release, `dlq replay`'s, or a trigger from before 0075
    assert standby.answer("")


def test_an_answer_is_forgotten_after_a_while() -> None:
    now = [100.0]
    standby = Standby(clock=lambda: now[0])
    assert standby.answer("7301@1")
    now[0] = 100.0 + FRESH_S / 2
    assert not standby.answer("7301@1")
    now[0] = 100.0 + FRESH_S  # sent again (another login's NOTIFY): an empty pass at worst
    assert standby.answer("7301@1")


def test_only_the_last_notifications_are_remembered() -> None:
    standby = Standby(clock=lambda: 100.0)
    for txid in range(REMEMBERED + 1):
        assert standby.answer(str(txid))
    assert standby.answer("0")  # forgotten: answered again, an empty pass at worst
    assert not standby.answer(str(REMEMBERED))


def test_a_release_is_counted() -> None:
    standby = Standby()
    seen = standby.releases
    standby.release()  # a worker's claim came back full
    assert standby.releases == seen + 1
