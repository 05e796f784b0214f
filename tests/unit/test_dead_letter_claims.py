"""When a pointer worker's pass claims dead letters as well as sends
(relay/dead_letter_claims.py)."""

from __future__ import annotations

from mailbus.relay.dead_letter_claims import DeadLetterClaims, may_name_dead_letters

SEND = "7301@1796605597505000"  # a new send's notification (schemas/sql/0075)
DEAD_LETTER = "dead-letter:7303@1796605597507000"  # a dead letter's (0077)


def test_notifications_of_new_sends_alone_name_no_dead_letters() -> None:
    assert not may_name_dead_letters([SEND])
    assert not may_name_dead_letters([SEND, "7302@1796605597506000"])
    assert may_name_dead_letters([SEND, DEAD_LETTER])
    assert may_name_dead_letters([""])  # `dlq replay`'s, or a release: it may be of anything


def test_a_pass_for_sends_alone_skips_dead_letters_after_a_claim_that_left_none() -> None:
    claims = DeadLetterClaims(interval_s=1.0)
    claims.left_none(began_at=100.0)
    assert not claims.due(100.5, sends_alone=True)
    assert claims.due(100.5, sends_alone=False)  # the polling interval, a release, a reconnect


def test_dead_letters_are_claimed_at_least_once_a_polling_interval_while_sends_wake_it() -> None:
    claims = DeadLetterClaims(interval_s=1.0)
    claims.left_none(began_at=100.0)
    assert not claims.due(100.99, sends_alone=True)
    assert claims.due(101.0, sends_alone=True)


def test_until_a_claim_leaves_none_behind_every_pass_claims_dead_letters() -> None:
    claims = DeadLetterClaims(interval_s=1.0)
    assert claims.due(100.0, sends_alone=True)  # none yet
    claims.left_none(began_at=100.0)
    claims.forget()  # a claim began (and failed, or Kafka refused one), or a reconnect
    assert claims.due(100.1, sends_alone=True)
