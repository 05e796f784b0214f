"""relay/standby.py: the first worker to take a notification answers it; the others pass it
by; a notification without a name is answered by each."""

from __future__ import annotations

from mailbus.relay.standby import REMEMBERED, Standby


def test_a_named_notification_is_answered_once() -> None:
    standby = Standby()
    assert standby.answer("7301")  # the first worker to take it claims
    assert not standby.answer("7301")  # the second passes it by
    assert standby.answer("7302")  # the next transaction's is answered again


def test_a_notification_without_a_name_is_answered_by_each() -> None:
    standby = Standby()
    assert standby.answer("")  # `dlq replay`'s, or a trigger from before 0075
    assert standby.answer("")


def test_only_the_last_notifications_are_remembered() -> None:
    standby = Standby()
    for txid in range(REMEMBERED + 1):
        assert standby.answer(str(txid))
    assert standby.answer("0")  # forgotten: answered again, an empty claim at worst
    assert not standby.answer(str(REMEMBERED))
