"""When a send lane looks up the next retry coming due (relay/next_retry.py)."""

from __future__ import annotations

import math

from mailbus.relay.next_retry import NextRetry


def test_a_lane_looks_up_before_its_first_sleep() -> None:
    assert NextRetry().stale(now=100.0)


def test_an_answer_holds_for_its_hold_then_is_looked_up_again() -> None:
    retry = NextRetry(hold_s=0.1)
    retry.looked_up(now=100.0, seconds_until_due=None)
    assert retry.due_at == math.inf
    assert not retry.stale(now=100.05)
    assert retry.stale(now=100.1)


def test_a_retry_that_comes_due_ends_the_answer_before_its_hold() -> None:
    retry = NextRetry(hold_s=10.0)
    retry.looked_up(now=100.0, seconds_until_due=2.5)
    assert retry.due_at == 102.5
    assert not retry.stale(now=102.4)
    assert retry.stale(now=102.5)  # the retry after it is not known


def test_a_due_time_already_past_is_now() -> None:
    retry = NextRetry()
    retry.looked_up(now=100.0, seconds_until_due=-0.3)  # the database's clock ran ahead
    assert retry.due_at == 100.0


def test_a_new_connection_forgets_the_answer() -> None:
    retry = NextRetry(hold_s=10.0)
    retry.looked_up(now=100.0, seconds_until_due=5.0)
    retry.forget()
    assert retry.stale(now=100.0)
    assert retry.due_at == math.inf


def test_a_lane_sleeping_on_a_held_answer_wakes_when_it_stops_holding() -> None:
    retry = NextRetry(hold_s=0.1)
    retry.looked_up(now=100.0, seconds_until_due=None)
    assert retry.held_until() == 100.1  # a retry scheduled since is found then
    retry.looked_up(now=100.0, seconds_until_due=0.05)
    assert retry.held_until() == 100.05  # or when the retry it found comes due


def test_an_idle_lane_wakes_when_its_retry_comes_due_and_not_before() -> None:
    retry = NextRetry(hold_s=0.1)
    retry.looked_up(now=100.0, seconds_until_due=None)
    assert retry.wake_at() == math.inf  # no pass while idle
    retry.looked_up(now=100.2, seconds_until_due=5.0)
    assert retry.wake_at() == 105.2


def test_after_a_wake_for_its_retry_a_lane_wakes_again_when_the_hold_ends() -> None:
    """Its claim may come a moment before the database's now() passes the retry's
    next_try_at; the look-up after it, of retries still ahead, no longer sees that retry:
    one more pass at the hold's end claims it (it waited for the polling interval)."""
    retry = NextRetry(hold_s=0.1)
    retry.looked_up(now=100.0, seconds_until_due=1.0)
    assert retry.wake_at() == 101.0
    assert retry.stale(now=101.0)  # woke for it; its claim took nothing
    retry.looked_up(now=101.0, seconds_until_due=None)
    assert retry.wake_at() == 101.1
    retry.looked_up(now=101.1, seconds_until_due=None)  # that pass
    assert retry.wake_at() == math.inf  # once: idle again
