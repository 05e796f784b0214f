"""The status table of consumer.core.states."""

from __future__ import annotations

import pytest

from mailbus.consumer.core.states import (
    TERMINAL,
    TRANSITIONS,
    Status,
    can_transition,
    claimable_from,
)

S = Status

EXPECTED = {
    # accepted/unknown: a tried row's gate verdict, overturned or deferred by a look-up
    S.PENDING: {S.SENDING, S.EXPIRED, S.SUPPRESSED, S.FAILED, S.ACCEPTED, S.UNKNOWN},
    S.SENDING: {S.ACCEPTED, S.FAILED, S.PENDING, S.UNKNOWN, S.EXPIRED},
    S.UNKNOWN: {S.SENDING, S.ACCEPTED, S.PENDING, S.FAILED, S.EXPIRED},
    S.FAILED: {S.PENDING},
    S.ACCEPTED: set(),
    S.EXPIRED: set(),
    S.SUPPRESSED: set(),
}


def test_status_values_are_the_column_texts() -> None:
    assert [s.value for s in Status] == [
        "pending",
        "sending",
        "accepted",
        "failed",
        "unknown",
        "expired",
        "suppressed",
    ]
    assert Status("unknown") is S.UNKNOWN
    assert f"{S.PENDING}" == "pending"  # StrEnum: usable directly as an SQL parameter


def test_transitions_table_is_exactly_the_design() -> None:
    assert set(TRANSITIONS) == set(Status)
    assert {src: set(dsts) for src, dsts in TRANSITIONS.items()} == EXPECTED


def test_transitions_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[S.ACCEPTED] = frozenset({S.PENDING})  # type: ignore[index]


def test_terminal_statuses() -> None:
    assert frozenset({S.ACCEPTED, S.FAILED, S.EXPIRED, S.SUPPRESSED}) == TERMINAL


@pytest.mark.parametrize("status", sorted(TERMINAL - {S.FAILED}))
def test_terminal_statuses_have_no_way_out(status: Status) -> None:
    assert not TRANSITIONS[status]
    assert not any(can_transition(status, dst) for dst in Status)


def test_failed_leaves_only_for_a_replay_to_pending() -> None:
    assert [dst for dst in Status if can_transition(S.FAILED, dst)] == [S.PENDING]


@pytest.mark.parametrize("status", list(Status))
def test_no_status_moves_to_itself(status: Status) -> None:
    assert not can_transition(status, status)


@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in Status for d in Status])
def test_can_transition_agrees_with_the_table(src: Status, dst: Status) -> None:
    assert can_transition(src, dst) is (dst in EXPECTED[src])


def test_claimable_from_is_pending_and_unknown() -> None:
    assert claimable_from() == (S.PENDING, S.UNKNOWN)
    assert not set(claimable_from()) & TERMINAL


@pytest.mark.parametrize("status", list(Status))
def test_every_status_is_reachable_from_pending(status: Status) -> None:
    seen, frontier = {S.PENDING}, [S.PENDING]
    while frontier:
        for dst in TRANSITIONS[frontier.pop()]:
            if dst not in seen:
                seen.add(dst)
                frontier.append(dst)
    assert status in seen


def test_a_claimed_row_can_always_be_sent() -> None:
    assert all(can_transition(src, S.SENDING) for src in claimable_from())
