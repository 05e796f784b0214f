"""The seed's one-time code resent after a cool-down: the first code, cancelled while the
relay and a consumer run, never goes out; the second does."""

from __future__ import annotations

import time

import pytest
from e2e_stack import Stack
from relay_runner import wait_until
from services import run_mailbus

pytestmark = pytest.mark.stack


def test_a_cancelled_pending_code_is_never_sent_by_a_running_consumer(stack: Stack) -> None:
    stack.start_relay()
    stack.start_consumer(priorities="p0")
    [first] = stack.seed(1, prefix="otp-first", priority="p0", template="one_time_code")
    stack.query(  # due in 4 s: the processes run and would send it then
        "UPDATE email_sends SET next_try_at = now() + interval '4 seconds'"
        " WHERE dedupe_key = %s RETURNING id",
        first,
    )
    cancelled = run_mailbus("send", "cancel", first, env=stack.env())
    assert cancelled.returncode == 0, cancelled.stderr
    [second] = stack.seed(1, prefix="otp-second", priority="p0", template="one_time_code")

    wait_until(lambda: second in stack.ledger()["keys"], 30, "the second code sent")
    time.sleep(6)  # past the first code's due time, the consumer still running
    assert stack.wait_settled(30) == {"accepted": 1, "expired": 1}
    assert first not in stack.ledger()["keys"]
    stack.assert_table_agrees_with_providers()
