"""Replies about our account, sender identity or quota are the provider's state, never the
mail's (docs/providers.md#account-sender-and-quota-replies): each adapter maps its
provider's documented bodies, the breaker opens under a burst of them, no attempt is spent,
a quota waits MAILBUS_QUOTA_PAUSE, and a rate limit outside HTTP 429 feeds no breaker."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mailbus.consumer.core.backoff import RetryPolicy, quota_wait
from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.decide import SendView, after_call
from mailbus.consumer.core.outcome import (
    ACCOUNT,
    QUOTA,
    SENDER,
    Classification,
    Outcome,
    classify,
)
from mailbus.consumer.core.states import Status
from mailbus.consumer.gate import Admission, ProviderGate
from mailbus.consumer.provider import Dialect, MailbusDialect
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.resend.sending import ResendDialect
from mailbus.providers.sendgrid.sending import SendGridDialect
from mailbus.providers.ses.sending import ses_error_result

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
DIALECTS: dict[str, Dialect] = {
    "http": MailbusDialect(),
    "resend": ResendDialect("shop@example.com"),
    "postmark": PostmarkDialect("shop@example.com"),
    "sendgrid": SendGridDialect("shop@example.com"),
    "mailgun": MailgunDialect("shop@mg.example.com", "mg.example.com"),
}


def _resend(status: int, name: str, message: str) -> bytes:
    return json.dumps({"statusCode": status, "name": name, "message": message}).encode()


def _postmark(code: int, message: str) -> bytes:
    return json.dumps({"ErrorCode": code, "Message": message}).encode()


def _sendgrid(message: str) -> bytes:
    return json.dumps({"errors": [{"message": message, "field": None, "help": None}]}).encode()


# (dialect, status, body, the state it is, or None: the mail's verdict as before)
DOCUMENTED: list[tuple[str, int, bytes, str | None]] = [
    # docs/reference/contract.md#email-api
    ("http", 401, b'{"error": "unauthorized", "message": "missing or wrong API key"}', ACCOUNT),
    ("http", 403, b'{"error": "forbidden"}', ACCOUNT),
    ("http", 429, b'{"error": "quota_exceeded", "message": "daily quota"}', QUOTA),
    ("http", 422, b'{"error": "unprocessable"}', None),
    # https://resend.com/docs/api-reference/errors
    ("resend", 401, _resend(401, "missing_api_key", "Missing API key in the header."), ACCOUNT),
    ("resend", 401, _resend(401, "restricted_api_key", "This API key is restricted."), ACCOUNT),
    ("resend", 403, _resend(403, "invalid_api_key", "API key is invalid."), ACCOUNT),
    (
        "resend",
        403,
        _resend(403, "validation_error", "The example.com domain is not verified. Please, add"),
        SENDER,
    ),
    (
        "resend",
        403,
        _resend(
            403,
            "validation_error",
            "You can only send testing emails to your own email "
            "address. To send emails to other recipients, please verify a domain",
        ),
        SENDER,
    ),
    ("resend", 429, _resend(429, "daily_quota_exceeded", "You have reached your daily"), QUOTA),
    ("resend", 429, _resend(429, "monthly_quota_exceeded", "You have reached your"), QUOTA),
    ("resend", 422, _resend(422, "validation_error", "Invalid `to` field."), None),
    # https://postmarkapp.com/developer/api/overview#error-codes
    ("postmark", 401, _postmark(10, "Bad or missing API token"), ACCOUNT),
    ("postmark", 403, b"<html><body><h1>403 Forbidden</h1></body></html>", ACCOUNT),
    ("postmark", 422, _postmark(10, "Bad or missing API token"), ACCOUNT),
    ("postmark", 422, _postmark(405, "Not allowed to send"), ACCOUNT),
    ("postmark", 422, _postmark(412, "Account is pending"), ACCOUNT),
    ("postmark", 422, _postmark(413, "Account may not send"), ACCOUNT),
    (
        "postmark",
        422,
        _postmark(
            400, "The 'From' address you supplied is not a Sender Signature on your account."
        ),
        SENDER,
    ),
    ("postmark", 422, _postmark(401, "Sender signature not confirmed"), SENDER),
    (
        "postmark",
        422,
        _postmark(
            300, "Invalid 'From' address: 'shop@example.com' is not a verified sender signature."
        ),
        SENDER,
    ),
    ("postmark", 422, _postmark(300, "Invalid 'To' address: 'ana@'."), None),
    (
        "postmark",
        422,
        _postmark(406, "You tried to send to a recipient that has been marked as inactive."),
        None,
    ),
    # https://support.sendgrid.com/hc/en-us/articles/18322114821403
    (
        "sendgrid",
        401,
        _sendgrid("The provided authorization grant is invalid, expired, or revoked"),
        ACCOUNT,
    ),
    ("sendgrid", 403, _sendgrid("access forbidden"), ACCOUNT),
    (
        "sendgrid",
        403,
        _sendgrid(
            "The from address does not match a verified Sender Identity. "
            "Mail cannot be sent until this error is resolved."
        ),
        SENDER,
    ),
    ("sendgrid", 401, _sendgrid("Maximum credits exceeded"), QUOTA),
    ("sendgrid", 400, _sendgrid("Does not contain a valid address."), None),
    # https://documentation.mailgun.com/docs/mailgun/quickstart-guide/responses
    ("mailgun", 401, b"Forbidden", ACCOUNT),
    (
        "mailgun",
        403,
        b'{"message": "Domain sandbox1.mailgun.org is not allowed to send: Free '
        b'accounts are for test purposes only."}',
        ACCOUNT,
    ),
    ("mailgun", 404, b'{"message": "Domain not found: mg.example.com"}', SENDER),
    ("mailgun", 400, b'{"message": "from parameter is missing"}', None),
]


@pytest.mark.parametrize(("dialect", "status", "body", "state"), DOCUMENTED)
def test_documented_replies_about_our_account_are_the_providers_state(
    dialect: str, status: int, body: bytes, state: str | None
) -> None:
    result = classify(DIALECTS[dialect].reply(status, {}, body, NOW))
    assert result.server_stage == state, result
    assert result.outcome is (Outcome.RETRY if state else Outcome.REJECTED)


@pytest.mark.parametrize(
    ("status", "code", "message", "state", "outcome"),
    [
        # https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html
        (400, "Throttling", "Daily message quota exceeded.", QUOTA, Outcome.RETRY),
        (400, "ThrottlingException", "Daily message quota exceeded.", QUOTA, Outcome.RETRY),
        (400, "Throttling", "Maximum sending rate exceeded.", None, Outcome.RETRY),
        (400, "MailFromDomainNotVerifiedException", "not verified", SENDER, Outcome.RETRY),
        (
            404,
            "NotFoundException",
            "Configuration set <cs> does not exist.",
            ACCOUNT,
            Outcome.RETRY,
        ),
        (404, "NotFoundException", "Template order does not exist.", None, Outcome.REJECTED),
        (403, "AccessDeniedException", "not authorized", ACCOUNT, Outcome.RETRY),
    ],
)
def test_ses_quota_sender_and_configuration_errors(
    status: int, code: str, message: str, state: str | None, outcome: Outcome
) -> None:
    result = classify(ses_error_result(status, code, message))
    assert (result.server_stage, result.outcome) == (state, outcome)
    assert result.throttled is (message.startswith("Maximum sending rate"))


@pytest.mark.parametrize(
    ("dialect", "status", "body"),
    [
        ("resend", 429, _resend(429, "rate_limit_exceeded", "Too many requests.")),
        ("postmark", 422, _postmark(429, "Rate limit exceeded")),
        ("http", 429, b'{"error": "rate_limited"}'),
    ],
)
def test_rate_limits_pause_and_never_feed_the_breaker(
    dialect: str, status: int, body: bytes
) -> None:
    """A rate limit is the provider answering: the process pauses for it and the breaker
    stays closed, however many come (before: Postmark's 422/429 opened the breaker)."""
    result = classify(DIALECTS[dialect].reply(status, {"Retry-After": "3"}, body, NOW))
    assert (result.outcome, result.throttled, result.server_stage) == (Outcome.RETRY, True, None)
    gate = _gate()
    for _ in range(10):
        gate.settle(Admission(), result, 0.01)
    assert gate.breaker.state is BreakerState.CLOSED
    assert gate._paused_until > 0  # the process waits for the Retry-After


def test_a_concurrent_idempotent_request_never_feeds_the_breaker() -> None:
    body = _resend(409, "concurrent_idempotent_requests", "in progress")
    result = classify(DIALECTS["resend"].reply(409, {}, body, NOW))
    assert (result.outcome, result.transient, result.throttled) == (Outcome.RETRY, True, False)
    gate = _gate()
    for _ in range(10):
        gate.settle(Admission(), result, 0.01)
    assert gate.breaker.state is BreakerState.CLOSED
    assert gate._paused_until == 0.0  # about one request: nothing else waits


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_a_burst_of_bad_key_replies_opens_the_breaker(dialect: str) -> None:
    """32 calls in flight when the key is revoked: all come back refused, and the breaker
    opens (the default policy: 5 in a row) instead of the backlog being failed."""
    body = {"mailgun": b"Forbidden", "postmark": _postmark(10, "Bad or missing API token")}
    refused = classify(DIALECTS[dialect].reply(401, {}, body.get(dialect, b"{}"), NOW))
    gate = _gate(max_in_flight=32)

    async def burst() -> None:
        admissions = [await gate.admit_send() for _ in range(32)]
        for admission in admissions:
            gate.settle(admission, refused, 0.01)

    asyncio.run(burst())
    assert gate.breaker.state is BreakerState.OPEN


ROW = SendView(7, "order-7", "ana@example.com", "t", "p1", Status.SENDING, attempts=3)
POLICY = RetryPolicy(quota_pause_s=1800.0)


def _refused(state: str, retry_after_s: float | None = None) -> Classification:
    return Classification(
        Outcome.RETRY, status_code=429, server_stage=state, retry_after_s=retry_after_s
    )


@pytest.mark.parametrize("state", [ACCOUNT, SENDER, QUOTA])
def test_no_attempt_is_spent_and_nothing_fails(state: str) -> None:
    last = replace(ROW, attempts=POLICY.max_attempts)  # even the last attempt
    decision = after_call(last, _refused(state), NOW, POLICY, lambda: 0.5)
    assert decision.next_status is Status.PENDING
    assert decision.uncounted and not decision.dead_letter


def test_a_quota_waits_the_quota_pause_not_the_backoff() -> None:
    decision = after_call(ROW, _refused(QUOTA, retry_after_s=1.0), NOW, POLICY, lambda: 0.5)
    assert decision.retry_at == NOW + timedelta(seconds=1800)  # a 1 s rate header is no reset
    account = after_call(ROW, _refused(ACCOUNT), NOW, POLICY, lambda: 0.5)
    assert account.retry_at is not None and account.retry_at < NOW + timedelta(seconds=60)


def test_quota_wait_takes_a_longer_retry_after() -> None:
    assert quota_wait(RetryPolicy(quota_pause_s=60.0), None) == 60.0
    assert quota_wait(RetryPolicy(quota_pause_s=60.0), 600.0) == 600.0
    assert quota_wait(RetryPolicy(quota_pause_s=60.0), 5.0) == 60.0


def test_a_quota_past_the_expiry_expires_the_mail() -> None:
    soon = replace(ROW, expires_at=NOW + timedelta(minutes=10))
    decision = after_call(soon, _refused(QUOTA), NOW, POLICY, lambda: 0.5)
    assert decision.next_status is Status.EXPIRED and decision.uncounted


def _gate(max_in_flight: int = 4, **policy: Any) -> ProviderGate:
    return ProviderGate(
        max_in_flight,
        BreakerPolicy(**policy),
        None,
        on_breaker_change=lambda _state: None,
        on_limit_change=lambda _limit: None,
    )


def test_ses_unverified_from_is_the_senders_and_an_unverified_recipient_the_mails() -> None:
    """SES's MessageRejected names the identities that failed the check: our From address
    is the sender identity's state; a recipient alone (an SES sandbox account) the mail's."""
    text = "Email address is not verified. The following identities failed the check in "
    sender = "Shop <shop@example.com>"
    ours = classify(ses_error_result(400, "MessageRejected", text + "shop@example.com", sender))
    theirs = classify(ses_error_result(400, "MessageRejected", text + "ana@example.com", sender))
    assert (ours.outcome, ours.server_stage) == (Outcome.RETRY, SENDER)
    assert (theirs.outcome, theirs.server_stage) == (Outcome.REJECTED, None)
