"""relay/next_due.py: the time until the next retry, looked up at most every 0.25 s and
again once it has passed."""

from __future__ import annotations

import pytest

from mailbus.relay.next_due import LOOKUP_EVERY_S, NextDue


class Lookups:
    def __init__(self, *answers: float | None) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> float | None:
        self.calls += 1
        return self.answers.pop(0)


def test_the_answer_is_kept_as_a_moment_until_it_is_stale() -> None:
    now = [100.0]
    lookups = Lookups(10.0, 3.0)
    due = NextDue(lookups, clock=lambda: now[0])
    assert due.seconds_left() == 10.0
    now[0] += 0.1
    assert due.seconds_left() == pytest.approx(9.9)  # the same moment, nearer; no statement
    assert lookups.calls == 1
    now[0] += LOOKUP_EVERY_S
    assert due.seconds_left() == 3.0  # stale: looked up again (an earlier retry came)
    assert lookups.calls == 2


def test_a_moment_that_has_passed_is_looked_up_again() -> None:
    now = [100.0]
    lookups = Lookups(0.05, None)
    due = NextDue(lookups, clock=lambda: now[0])
    assert due.seconds_left() == pytest.approx(0.05)
    now[0] += 0.06  # the retry came due (and a pass published it)
    assert due.seconds_left() is None  # not 0 again and again until the answer is stale
    assert lookups.calls == 2


def test_no_retry_waiting_is_kept_too() -> None:
    now = [100.0]
    lookups = Lookups(None, -1.0)
    due = NextDue(lookups, clock=lambda: now[0])
    assert due.seconds_left() is None
    assert due.seconds_left() is None
    now[0] += LOOKUP_EVERY_S
    assert due.seconds_left() == 0.0  # never a negative wait
    assert lookups.calls == 2
