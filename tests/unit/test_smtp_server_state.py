"""SMTP replies about the server itself (connecting, the greeting, AUTH, MAIL) are the
provider's state: a retry that spends no attempt, counted by the breaker, never a
recipient's ``failed`` and never a throttled recipient domain (CONTRACT section 8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mailbus.consumer.core.backoff import RetryPolicy, retry_delay
from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.decide import SendView, after_call
from mailbus.consumer.core.domains import domain_throttled
from mailbus.consumer.core.outcome import Classification, Outcome
from mailbus.consumer.core.smtp_outcome import SmtpDown, SmtpReply, classify_smtp
from mailbus.consumer.core.states import Status
from mailbus.consumer.gate import Admission, ProviderGate
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings
from mailbus.providers.smtp.sending import SmtpProvider, SmtpTarget

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
POLICY = RetryPolicy(max_attempts=3, base_s=2.0, cap_s=300.0)


@pytest.mark.parametrize(
    ("reply", "stage", "code"),
    [
        (SmtpReply(421, "4.7.0 too many connections", "connect"), "connect", "421 4.7.0"),
        (SmtpReply(554, "5.3.2 no service here", "connect"), "connect", "554 5.3.2"),
        (SmtpReply(454, "4.7.0 TLS not available", "connect"), "connect", "454 4.7.0"),
        (SmtpReply(535, "5.7.8 credentials invalid", "auth"), "auth", "535 5.7.8"),
        (SmtpReply(530, "5.7.0 Authentication required", "mail"), "mail", "530 5.7.0"),
        (SmtpReply(421, "4.4.2 closing, idle", "mail"), "mail", "421 4.4.2"),
        (SmtpReply(553, "5.7.1 sender not owned", "mail"), "mail", "553 5.7.1"),
        (SmtpReply(530, "5.7.0 Authentication required", "rcpt"), "rcpt", "530 5.7.0"),
    ],
)
def test_server_replies_are_a_retry_of_the_servers_state(
    reply: SmtpReply, stage: str, code: str
) -> None:
    result = classify_smtp(reply)
    assert (result.outcome, result.server_stage, result.provider_code) == (
        Outcome.RETRY,
        stage,
        code,
    )
    assert not domain_throttled(result)
    assert result.reason.startswith("smtp server, ")


@pytest.mark.parametrize("stage", ["connect", "auth", "mail", "rcpt"])
def test_no_reply_before_data_is_the_servers_state(stage: str) -> None:
    result = classify_smtp(SmtpDown(stage, "ConnectionResetError: reset by peer"))
    assert (result.outcome, result.server_stage) == (Outcome.RETRY, stage)
    assert not domain_throttled(result)
    assert "reset by peer" in result.reason


@pytest.mark.parametrize(
    ("reply", "outcome", "throttles"),
    [
        (SmtpReply(421, "4.7.0 try again later", "rcpt"), Outcome.RETRY, True),
        (SmtpReply(452, "4.5.3 too many recipients", "rcpt"), Outcome.RETRY, True),
        (SmtpReply(550, "5.1.1 user unknown", "rcpt"), Outcome.REJECTED, False),
        (SmtpReply(554, "5.7.1 spam", "data"), Outcome.REJECTED, False),
        (SmtpReply(451, "4.3.0 try later", "data"), Outcome.RETRY, False),
    ],
)
def test_replies_about_the_mail_stay_per_mail(
    reply: SmtpReply, outcome: Outcome, throttles: bool
) -> None:
    result = classify_smtp(reply)
    assert (result.outcome, result.server_stage) == (outcome, None)
    assert domain_throttled(result) is throttles


def _sending(attempts: int, expires_at: datetime | None = None) -> SendView:
    return SendView(1, "k", "a@b.example", "t", "p1", Status.SENDING, attempts, expires_at)


AUTH_535 = classify_smtp(SmtpReply(535, "5.7.8 credentials invalid", "auth"))


@pytest.mark.parametrize("attempts", [1, 3])  # 3: the call was the last one allowed
def test_a_server_failure_hands_the_attempt_back_and_never_fails(attempts: int) -> None:
    decision = after_call(_sending(attempts), AUTH_535, NOW, POLICY, lambda: 0.0)
    assert (decision.next_status, decision.uncounted, decision.dead_letter) == (
        Status.PENDING,
        True,
        False,
    )
    assert decision.provider_code == "535 5.7.8"
    assert "attempt not counted" in decision.reason
    # the backoff of the attempt the mail is still at, not of one more
    delay = retry_delay(max(attempts - 1, 1), POLICY, lambda: 0.0)
    assert decision.retry_at == NOW + timedelta(seconds=delay)


def test_a_server_failure_still_lets_the_mail_expire() -> None:
    row = _sending(1, expires_at=NOW + timedelta(seconds=0.5))
    decision = after_call(row, AUTH_535, NOW, POLICY, lambda: 0.0)
    assert (decision.next_status, decision.uncounted, decision.dead_letter) == (
        Status.EXPIRED,
        True,
        False,
    )


def test_a_mail_reply_still_counts_and_fails() -> None:
    rejected = classify_smtp(SmtpReply(550, "5.1.1 user unknown", "rcpt"))
    decision = after_call(_sending(1), rejected, NOW, POLICY, lambda: 0.0)
    assert (decision.next_status, decision.uncounted, decision.dead_letter) == (
        Status.FAILED,
        False,
        True,
    )


def test_the_gate_opens_the_breaker_on_server_failures_and_throttles_no_domain() -> None:
    now = [0.0]
    changes: list[BreakerState] = []
    gate = ProviderGate(
        4,
        BreakerPolicy(failure_threshold=3, cool_down_s=5.0),
        None,
        on_breaker_change=changes.append,
        on_limit_change=lambda _l: None,
        clock=lambda: now[0],
    )
    greeting = classify_smtp(SmtpReply(421, "4.7.0 too many connections", "connect"))
    for domain in ("a.example", "b.example", "c.example"):
        gate.settle(Admission(), greeting, 0.01, domain)
        assert gate.domain_pause(domain) == 0.0  # the unlucky recipient is not blamed
    assert gate.breaker.state is BreakerState.OPEN
    now[0] = 6.0  # the server is back: the probe's acceptance closes the breaker
    accepted = Classification(Outcome.ACCEPTED, message_id="Q1", provider_code="250")
    gate.settle(Admission(probe=True), accepted, 0.01, "a.example")
    assert gate.breaker.state is BreakerState.CLOSED
    assert changes == [BreakerState.OPEN, BreakerState.CLOSED]


@pytest.mark.parametrize("url", ["smtp://mailer@mx.example", "smtp://mailer@mx.example:2525"])
def test_auth_without_tls_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        SmtpTarget.parse(url)
    assert error.value.setting == "MAILBUS_SMTP_URL"
    assert "MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH" in str(error.value)
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="MAILBUS_SMTP_URL"):
        SmtpProvider(url, "noreply@shop.example")
    assert SmtpTarget.parse(url, allow_plaintext_auth=True).username == "mailer"
    SmtpProvider(url, "noreply@shop.example", allow_plaintext_auth=True)


@pytest.mark.parametrize(
    "url", ["smtp://mx.example", "smtp+starttls://mailer@mx.example", "smtps://mailer@mx.example"]
)
def test_tls_or_no_auth_needs_no_allowance(url: str) -> None:
    SmtpTarget.parse(url)


def test_the_allowance_is_a_setting() -> None:
    assert load_settings({}).smtp_allow_plaintext_auth is False
    for raw, value in [("true", True), ("1", True), ("yes", True), ("false", False), ("0", False)]:
        env = {"MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH": raw}
        assert load_settings(env).smtp_allow_plaintext_auth is value
    with pytest.raises(ConfigError, match="MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH"):
        load_settings({"MAILBUS_SMTP_ALLOW_PLAINTEXT_AUTH": "maybe"})
