"""A revoked or rotated API key under load is the provider's state, never the mail's
(docs/providers.md#account-sender-and-quota-replies, docs/runbook.md).

The sandbox refuses our key for REVOKED_S seconds while a backlog drains, answering each
dialect's own bad-key reply: nothing is ``failed``, no dead letter is written, the breaker
opens (so the refused calls are a handful, not the backlog retried over and over), and once
the key is accepted again every mail is accepted exactly once. A key rotated in
MAILBUS_PROVIDER_API_KEY_FILE is taken up by a running consumer. Each run ends with the
table agreeing with the provider.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from e2e_stack import API_KEY, Stack
from relay_runner import wait_until

from mailbus.consumer.core.breaker import BreakerPolicy

DIALECTS = {  # a key and a look-up; a key; a look-up; neither
    "http": {},
    "resend": {"MAILBUS_PROVIDER": "resend", "MAILBUS_MAIL_FROM": "shop@example.com"},
    "postmark": {"MAILBUS_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"},
    "mailgun": {
        "MAILBUS_PROVIDER": "mailgun",
        "MAILBUS_MAIL_FROM": "shop@mg.example.com",
        "MAILBUS_MAILGUN_DOMAIN": "mg.example.com",
    },
}
ROTATED_KEY = "e2e-rotated-key-9876543210"
REVOKED_S = 8  # long enough for the breaker to open and send its probes


def accepted(stack: Stack) -> int:
    return stack.statuses()["accepted"]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_a_key_revoked_under_load_fails_nothing(stack: Stack, dialect: str) -> None:
    keys = stack.seed(300, prefix=f"revoked-{dialect}")
    stack.set_faults(latency_ms=100)  # about 40 mails a second through 4 slots
    stack.start_relay()
    # no recovery ramp after the outage: this test is about what the outage leaves behind
    stack.start_consumer(MAILBUS_MAX_IN_FLIGHT="4", MAILBUS_RECOVERY_RATE="0", **DIALECTS[dialect])
    wait_until(lambda: accepted(stack) >= 20, 60, "the backlog draining")
    stack.control("account", {"keys": []})  # the key is revoked
    time.sleep(REVOKED_S)
    during = stack.statuses()
    stack.control("account", {"keys": [API_KEY]})  # and valid again
    assert during["accepted"] < len(keys), "the backlog drained before the key was revoked"
    assert stack.wait_settled(120) == {"accepted": len(keys)}
    assert stack.query("SELECT count(*) FROM email_dead_letters") == [(0,)]
    assert stack.query("SELECT max(attempts) FROM email_sends") == [(1,)]  # none spent
    refused = stack.ledger()["totals"]["outcomes"].get("unauthorized", 0)
    assert 0 < refused < len(keys) - during["accepted"], refused  # the breaker opened
    assert stack.accepted_twice() == []
    stack.assert_table_agrees_with_providers()


def test_a_key_rotated_in_its_file_is_taken_up_without_a_restart(
    stack: Stack, tmp_path: Path
) -> None:
    key_file = tmp_path / "provider-key"
    key_file.write_text(API_KEY + "\n")
    first = stack.seed(10, prefix="before")
    stack.start_relay()
    consumer = stack.start_consumer(
        MAILBUS_PROVIDER_API_KEY="", MAILBUS_PROVIDER_API_KEY_FILE=str(key_file)
    )
    assert stack.wait_settled(60) == {"accepted": len(first)}
    stack.control("account", {"keys": [ROTATED_KEY]})  # the provider issues a new key
    rotated = tmp_path / "provider-key.new"
    rotated.write_text(ROTATED_KEY + "\n")
    os.replace(rotated, key_file)  # as a secret mount swaps it
    second = stack.seed(10, prefix="after")
    assert stack.wait_settled(60) == {"accepted": len(first) + len(second)}
    assert consumer.poll() is None  # the same process, never restarted
    assert stack.query("SELECT count(*) FROM email_dead_letters") == [(0,)]
    stack.assert_table_agrees_with_providers()


def test_a_spent_quota_waits_the_quota_pause_and_fails_nothing(stack: Stack) -> None:
    """Resend's ``daily_quota_exceeded`` (with a 1 s ``retry-after``, the rate limit's, no
    reset): every mail waits MAILBUS_QUOTA_PAUSE before its next try, spends no attempt,
    and is accepted once after the quota comes back.

    As many mails as the breaker's threshold: a quota reply feeds the breaker, so a mail
    polled after it opened waits for a probe instead of meeting the quota (under CI's load
    the consumer polled 20 mails in parts, and the last ones waited out the test)."""
    stack.control("account", {"quota": {"retry_after": 1}})
    keys = stack.seed(BreakerPolicy().failure_threshold, prefix="quota")
    stack.start_relay()
    stack.start_consumer(MAILBUS_QUOTA_PAUSE="6s", MAILBUS_RECOVERY_RATE="0", **DIALECTS["resend"])

    def refused_once() -> bool:
        return stack.query(
            "SELECT count(*) FROM email_sends WHERE last_error LIKE %s",
            "%daily_quota_exceeded%",
        ) == [(len(keys),)]

    wait_until(refused_once, 60, "every mail refused for the quota")
    waits = stack.query(
        "SELECT min(extract(epoch FROM next_try_at - updated_at)) FROM email_sends"
        " WHERE status = 'pending'"
    )
    assert waits[0][0] is not None and waits[0][0] > 5  # the pause, not the 1 s header
    stack.control("account", {"quota": None})
    assert stack.wait_settled(90) == {"accepted": len(keys)}
    assert stack.query("SELECT max(attempts) FROM email_sends") == [(1,)]
    assert stack.query("SELECT count(*) FROM email_dead_letters") == [(0,)]
    stack.assert_table_agrees_with_providers()
