"""Out-of-order completion never commits past an unfinished message."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mailbus.consumer.core.offsets import PartitionProgress


def test_nothing_seen_nothing_to_commit() -> None:
    assert PartitionProgress().committable() is None


def test_commits_only_below_the_lowest_in_flight() -> None:
    progress = PartitionProgress()
    for offset in (10, 11, 12):
        progress.started(offset)
    progress.finished(12)
    progress.finished(11)
    assert progress.committable() == 10  # 10 still in flight: commit "next is 10"
    progress.finished(10)
    assert progress.committable() == 13


def test_committed_offset_is_not_offered_again() -> None:
    progress = PartitionProgress()
    progress.started(5)
    progress.finished(5)
    assert progress.committable() == 6
    progress.mark_committed(6)
    assert progress.committable() is None
    progress.started(6)
    assert progress.committable() is None  # 6 in flight: still "next is 6"
    progress.finished(6)
    assert progress.committable() == 7


@given(st.permutations(list(range(30))), st.integers(0, 30))
def test_committable_never_passes_an_unfinished_offset(order: list[int], done: int) -> None:
    progress = PartitionProgress()
    for offset in range(30):
        progress.started(offset)
    finished = set(order[:done])
    for offset in order[:done]:
        progress.finished(offset)
    commit = progress.committable()
    unfinished = set(range(30)) - finished
    expected = min(unfinished) if unfinished else 30
    assert commit == expected
    assert all(offset in finished for offset in range(commit))
