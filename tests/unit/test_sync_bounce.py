"""Which synchronous rejections say the address itself is bad (issue 20 item 5): SMTP's
bad-address enhanced codes, SendGrid's and Mailgun's "invalid recipient" answers -- and
the decision that then suppresses it under ``sync:<provider>``; nothing else does."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from mailbus.consumer.core.backoff import RetryPolicy
from mailbus.consumer.core.decide import SendView, after_call
from mailbus.consumer.core.outcome import classify
from mailbus.consumer.core.smtp_outcome import SmtpReply, classify_smtp
from mailbus.consumer.core.states import Status
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.sendgrid.sending import SendGridDialect

NOW = datetime(2026, 12, 3, tzinfo=UTC)
ROW = SendView(1, "k", "ana@example.com", "t", "p1", Status.SENDING, 1)


@pytest.mark.parametrize(
    ("code", "text", "stage", "bad"),
    [
        (550, "5.1.1 User unknown", "rcpt", True),
        (550, "5.1.1 <ana@example.com>: Recipient address rejected", "end", True),
        (553, "5.1.3 Bad recipient address syntax", "rcpt", True),
        (550, "5.1.10 null MX", "rcpt", True),
        (550, "5.7.1 Message rejected as spam", "end", False),  # about the message
        (552, "5.2.2 Mailbox full", "rcpt", False),  # the mailbox exists
        (550, "User unknown", "rcpt", False),  # no enhanced code: not definite
        (450, "4.1.1 try later", "rcpt", False),  # temporary
    ],
)
def test_only_a_bad_address_code_marks_the_recipient(
    code: int, text: str, stage: str, bad: bool
) -> None:
    assert classify_smtp(SmtpReply(code, text, stage)).bad_recipient is bad


def test_the_decision_suppresses_only_a_bad_recipient_and_says_who_said_so() -> None:
    unknown = classify_smtp(SmtpReply(550, "5.1.1 User unknown", "rcpt"))
    decision = after_call(ROW, unknown, NOW, RetryPolicy(), lambda: 0.0, "sync:smtp")
    assert (decision.next_status, decision.suppress_source) == (Status.FAILED, "sync:smtp")
    spam = classify_smtp(SmtpReply(550, "5.7.1 spam", "end"))
    assert (
        after_call(ROW, spam, NOW, RetryPolicy(), lambda: 0.0, "sync:smtp").suppress_source is None
    )


def test_sendgrid_and_mailgun_invalid_recipient_answers() -> None:
    sendgrid = SendGridDialect("shop@example.com")
    invalid_to = {
        "message": "Does not contain a valid address.",
        "field": "personalizations.0.to.0.email",
    }
    invalid_from = {"message": "Does not contain a valid address.", "field": "from.email"}
    for error, bad in ((invalid_to, True), (invalid_from, False)):
        body = json.dumps({"errors": [error]}).encode()
        assert classify(sendgrid.reply(400, {}, body, NOW)).bad_recipient is bad
    mailgun = MailgunDialect("shop@mg.example.com", "mg.example.com")
    for message, bad in (
        ("to parameter is not a valid address. please check documentation", True),
        ("from parameter is not a valid address. please check documentation", False),
    ):
        body = json.dumps({"message": message}).encode()
        assert classify(mailgun.reply(400, {}, body, NOW)).bad_recipient is bad
