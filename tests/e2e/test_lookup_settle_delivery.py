"""Look-ups that can be trusted, windows that hold (issue 34; review 2026-12-06 #1, #2,
#4), through relay and consumer processes against the sandbox's Postmark and Resend
dialects. Each run ends with the table agreeing with the provider.

- Postmark answers after the client's timeout and its search shows the mail only seconds
  after accepting it: the first look-up finds nothing, and the mail is looked up again,
  never resent, until it is found: each mail sent once.
- Postmark accepts a mail and answers 500: the row is looked up before any resend: one mail.
- Resend answers 500 after accepting under a key with a 5 s window, and the retry
  schedule's next try falls after it: the retry is refused, the row ``unknown``.
"""

from __future__ import annotations

from e2e_stack import Stack
from relay_runner import wait_until

POSTMARK = {"MAILBUS_PROVIDER": "postmark", "MAILBUS_MAIL_FROM": "shop@example.com"}
RESEND = {"MAILBUS_PROVIDER": "resend", "MAILBUS_MAIL_FROM": "shop@example.com"}


def _requests(stack: Stack, kind: str) -> list[dict[str, object]]:
    return [r for r in stack.control("requests") if r["kind"] == kind]


def test_a_postmark_search_behind_a_late_answer_sends_each_mail_once(stack: Stack) -> None:
    """Review #1's scenario: the first answer comes 5 s after the send, the client gives up
    at 2 s and looks up at once; the search shows a mail 3 s after it was accepted. The
    default settle time (no MAILBUS_LOOKUP_SETTLE) keeps every such row ``unknown`` and
    looked up again until the search finds it."""
    stack.control("search", {"lag_s": 3})
    stack.set_faults({"kind": "slow", "share": 0.5, "ms": 5000})
    keys = stack.seed(8, prefix="late")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url, MAILBUS_REQUEST_TIMEOUT="2", **POSTMARK
    )
    assert stack.wait_settled(90) == {"accepted": len(keys)}
    totals = stack.ledger()["totals"]
    assert stack.accepted_twice() == []
    assert totals["sends"] == len(keys)  # not one resend
    assert totals["outcomes"].get("not_found", 0) > 0  # the early look-ups found nothing ...
    assert totals["outcomes"].get("found", 0) > 0  # ... and later ones the one mail
    stack.assert_table_agrees_with_providers()


def test_a_postmark_500_after_acceptance_is_looked_up_not_resent(stack: Stack) -> None:
    """Review #2's scenario: ``500_after_accept`` on Postmark. The sandbox logs one send and
    a look-up for the key, and holds one mail."""
    stack.control("search", {"lag_s": 1})
    stack.set_faults({"kind": "500_after_accept", "next": 1})
    (key,) = stack.seed(1, prefix="five-hundred")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url, MAILBUS_REQUEST_TIMEOUT="2", **POSTMARK
    )
    assert stack.wait_settled(60) == {"accepted": 1}
    assert len(_requests(stack, "send")) == 1
    assert any(r["outcome"] == "found" for r in _requests(stack, "lookup"))
    assert stack.ledger()["keys"][key]["accepted"] == 1
    stack.assert_table_agrees_with_providers()


def test_a_resend_retry_after_a_500_past_a_short_window_is_refused(stack: Stack) -> None:
    """Review #4's scenario: the key's window is 5 s at the sandbox and in mailbus, the
    retry schedule's next try is 10 s later, and the first call is accepted and answered
    500. The retry would be a second mail; it is refused, the row ``unknown`` for an
    operator, and the sandbox holds one mail."""
    stack.control("idempotency", {"window_s": 5})
    stack.set_faults({"kind": "500_after_accept", "next": 1})
    (key,) = stack.seed(1, prefix="resend-window")
    stack.start_relay()
    stack.start_consumer(
        MAILBUS_PROVIDER_URL=stack.sandbox.url,
        MAILBUS_IDEMPOTENCY_WINDOW="5",
        MAILBUS_RETRY_SCHEDULE="10s",
        MAILBUS_REQUEST_TIMEOUT="1",
        MAILBUS_CONNECT_TIMEOUT="0.2",
        MAILBUS_KEY_WINDOW_MARGIN="2",
        **RESEND,
    )

    def waiting_for_an_operator() -> bool:
        rows = stack.query("SELECT status, last_error FROM email_sends")
        return rows[0][0] == "unknown" and "operator" in (rows[0][1] or "")

    wait_until(waiting_for_an_operator, 60, "the row left for an operator")
    wait_until(
        lambda: (
            stack.query(  # the schedule's retry would be due by now
                "SELECT now() > first_tried_at + interval '12 seconds' FROM email_sends"
            )
            == [(True,)]
        ),
        30,
        "past the retry's time",
    )
    assert stack.statuses() == {"unknown": 1}
    ((error,),) = stack.query("SELECT last_error FROM email_sends")
    assert "past the idempotency key's window" in error
    assert len(_requests(stack, "send")) == 1
    assert stack.ledger()["keys"][key]["accepted"] == 1
    held = stack.ledger()["keys"][key]["id"]
    stack.query(  # the operator's `mailbus send resolve --accepted`, as SQL
        "UPDATE email_sends SET status = 'accepted', message_id = %s WHERE dedupe_key = %s"
        " RETURNING id",
        held,
        key,
    )
    stack.assert_table_agrees_with_providers()
