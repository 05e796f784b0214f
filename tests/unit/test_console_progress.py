"""A campaign's progress on the console's list (mailbus.console.figures.settled) counts only
its open mail, and agrees with the final states of campaign_counts, which count them all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mailbus.campaigns.views import campaign_counts
from mailbus.console.figures import settled

STATES = ("pending", "sending", "unknown", "accepted", "failed", "expired", "suppressed")
FINAL = ("accepted", "failed", "expired", "suppressed", "cancelled")
counts = st.integers(min_value=0, max_value=10_000)


@given(
    state=st.sampled_from(["draft", "running", "paused", "finished", "cancelled"]),
    sends=st.fixed_dictionaries({s: counts for s in STATES}),
    suppressed_before=counts,
    waiting=counts,
)
def test_settled_is_the_sum_of_the_final_states(
    state: str, sends: dict[str, int], suppressed_before: int, waiting: int
) -> None:
    # Each recipient handed out became a row or was suppressed before one was made.
    processed = sum(sends.values()) + suppressed_before
    recipients = processed + waiting
    open_sends = sends["pending"] + sends["sending"] + sends["unknown"]
    every = campaign_counts(state, recipients, processed, suppressed_before, sends)

    assert settled(state, recipients, processed, open_sends) == sum(every[s] for s in FINAL)
