"""The SMTP reply table, the retry schedule, and the SMTP message encoding."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from mailbus.consumer.core.backoff import RetryPolicy, retry_delay, with_schedule
from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.decide import SendView, after_call, after_lookup
from mailbus.consumer.core.outcome import Outcome, ProviderReply, TransportFailure
from mailbus.consumer.core.smtp_outcome import SmtpReply, classify_call, classify_smtp, queue_id
from mailbus.consumer.core.states import Status
from mailbus.consumer.provider import OutgoingMail
from mailbus.kernel.durations import parse_schedule
from mailbus.kernel.errors import ConfigError, InvalidSendError
from mailbus.kernel.settings import load_settings
from mailbus.providers.smtp.sending import SmtpProvider, SmtpTarget, message_id_for

OURS = "<0123@mailbus>"


@pytest.mark.parametrize(
    ("code", "text", "stage", "outcome", "provider_code"),
    [
        (250, "2.0.0 Ok: queued as 4B3C21E0F", "end", Outcome.ACCEPTED, "250 2.0.0"),
        (250, "OK", "end", Outcome.ACCEPTED, "250"),
        (421, "4.3.2 Service not available", "mail", Outcome.RETRY, "421 4.3.2"),
        (450, "4.2.1 mailbox busy", "rcpt", Outcome.RETRY, "450 4.2.1"),
        (451, "4.3.0 try later", "data", Outcome.RETRY, "451 4.3.0"),
        (452, "4.5.3 too many recipients", "rcpt", Outcome.RETRY, "452 4.5.3"),
        (454, "TLS not available", "mail", Outcome.RETRY, "454"),
        (550, "5.1.1 user unknown", "rcpt", Outcome.REJECTED, "550 5.1.1"),
        (554, "5.7.1 spam", "data", Outcome.REJECTED, "554 5.7.1"),
        (354, "go ahead", "data", Outcome.UNKNOWN, "354"),
        (250, "OK", "rcpt", Outcome.UNKNOWN, "250"),
    ],
)
def test_smtp_reply_table(
    code: int, text: str, stage: str, outcome: Outcome, provider_code: str
) -> None:
    result = classify_smtp(SmtpReply(code, text, stage, OURS))
    assert result.outcome is outcome
    assert result.provider_code == provider_code
    assert result.retry_after_s is None


def test_accepted_message_id_is_the_queue_id_else_ours() -> None:
    queued = classify_smtp(SmtpReply(250, "2.0.0 Ok: queued as 4B3C21E0F", "end", OURS))
    assert queued.message_id == "4B3C21E0F"
    assert classify_smtp(SmtpReply(250, "OK id=1rABCD-000123-AB", "end", OURS)).message_id == (
        "1rABCD-000123-AB"
    )
    assert classify_smtp(SmtpReply(250, "2.0.0 Ok", "end", OURS)).message_id == OURS
    assert queue_id("Ok") is None


def test_transport_failures_and_http_keep_their_meaning() -> None:
    assert classify_call(TransportFailure(False, "refused")).outcome is Outcome.RETRY
    assert classify_call(TransportFailure(True, "lost after DATA")).outcome is Outcome.UNKNOWN
    http = classify_call(ProviderReply(503))
    assert (http.outcome, http.provider_code) == (Outcome.RETRY, "503")


NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _row(attempts: int, status: Status = Status.SENDING) -> SendView:
    return SendView(1, "k", "a@b.example", "t", "p1", status, attempts)


def test_rejected_smtp_reply_fails_with_its_codes_and_a_dead_letter() -> None:
    verdict = classify_smtp(SmtpReply(550, "5.1.1 user unknown", "rcpt", OURS))
    decision = after_call(_row(1), verdict, NOW, RetryPolicy(), lambda: 0.5)
    assert (decision.next_status, decision.dead_letter) == (Status.FAILED, True)
    assert decision.provider_code == "550 5.1.1"
    assert decision.status_code is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m,30m,2h,24h", (300.0, 1800.0, 7200.0, 86400.0)),
        ("10s", (10.0,)),
        (" 1d , 2D", (86400.0, 172800.0)),
    ],
)
def test_schedule_parses(text: str, seconds: tuple[float, ...]) -> None:
    assert parse_schedule(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "m", "-5m", "0s", "5m,,1h", "1.5h", "5m;1h"])
def test_bad_schedule_names_the_setting(text: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"MAILBUS_RETRY_SCHEDULE": text} if text else {"MAILBUS_RETRY_SCHEDULE": ","})
    assert "MAILBUS_RETRY_SCHEDULE" in str(error.value)


def test_schedule_drives_delays_and_the_last_attempt() -> None:
    policy = with_schedule(RetryPolicy(), parse_schedule("5m,30m,2h"))
    assert policy.max_attempts == 4
    assert [retry_delay(n, policy, lambda: 0.0) for n in (1, 2, 3)] == [300.0, 1800.0, 7200.0]
    assert 300.0 <= retry_delay(1, policy, lambda: 0.99) <= 330.0  # a little jitter
    assert retry_delay(1, policy, lambda: 0.0, retry_after_s=600.0) == 600.0  # a minimum
    retry = classify_smtp(SmtpReply(451, "4.3.0 later", "data", OURS))
    second = after_call(_row(2), retry, NOW, policy, lambda: 0.0)
    assert second.next_status is Status.PENDING
    assert second.retry_at == NOW + timedelta(minutes=30)
    assert second.provider_code == "451 4.3.0"
    last = after_call(_row(4), retry, NOW, policy, lambda: 0.0)
    assert (last.next_status, last.dead_letter) == (Status.FAILED, True)


def test_unknown_row_is_looked_up_less_often_the_longer_in_doubt() -> None:
    policy = RetryPolicy(base_s=2.0, cap_s=300.0)
    waits = []
    for hours in (0.0, 0.01, 0.05, 1.0):
        row = SendView(
            1,
            "k",
            "a@b.example",
            "t",
            "p1",
            Status.SENDING,
            1,
            in_doubt_since=NOW - timedelta(hours=hours),
        )
        decision = after_lookup(row, None, True, NOW, policy, lambda: 0.0, detail="no look-up")
        assert decision.next_status is Status.UNKNOWN
        assert decision.retry_at is not None
        waits.append((decision.retry_at - NOW).total_seconds())
    assert waits == [1.0, 36.0, 180.0, 300.0]


def test_settings_choose_the_provider() -> None:
    assert load_settings({}).provider == "http"
    settings = load_settings(
        {
            "MAILBUS_PROVIDER": "smtp",
            "MAILBUS_SMTP_URL": "smtp+starttls://u@mx.example:2525",
            "MAILBUS_SMTP_FROM": "noreply@shop.example",
        }
    )
    assert (settings.provider, settings.smtp_from) == ("smtp", "noreply@shop.example")
    for env, name in [
        ({"MAILBUS_PROVIDER": "ftp"}, "MAILBUS_PROVIDER"),
        ({"MAILBUS_PROVIDER": "smtp", "MAILBUS_SMTP_FROM": "a@b.example"}, "MAILBUS_SMTP_URL"),
        ({"MAILBUS_PROVIDER": "smtp", "MAILBUS_SMTP_URL": "smtp://h"}, "MAILBUS_SMTP_FROM"),
    ]:
        with pytest.raises(ConfigError, match=name):
            load_settings(env)


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("smtp://mx.example", SmtpTarget("mx.example", 25, False, False, None)),
        ("smtp+starttls://u%40x@mx.example:587", SmtpTarget("mx.example", 587, True, False, "u@x")),
        ("smtps://user@mx.example", SmtpTarget("mx.example", 465, False, True, "user")),
    ],
)
def test_smtp_url(url: str, target: SmtpTarget) -> None:
    assert SmtpTarget.parse(url) == target


@pytest.mark.parametrize(
    "url",
    ["http://mx.example", "smtp://", "smtp://u:secret@mx", "smtp://mx/path", "smtp://mx:99999"],
)
def test_bad_smtp_url_names_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match="MAILBUS_SMTP_URL"):
        SmtpTarget.parse(url)


def _mail(**variables: object) -> OutgoingMail:
    return OutgoingMail("order-42", "a@b.example", "receipt", variables)


def test_prepare_builds_a_deterministic_message_id_and_uses_the_variables() -> None:
    provider = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    one = provider.prepare(_mail(subject="Your receipt", text="Thanks", html="<p>Thanks</p>"))
    two = provider.prepare(_mail(subject="Your receipt", text="Thanks"))
    assert one.message_id == two.message_id == message_id_for("order-42", "shop.example")
    assert one.message_id.startswith("<") and len(one.message_id) == len("<@shop.example>") + 32
    assert b"Message-ID: " + one.message_id.encode() in one.message
    assert b"Subject: Your receipt" in one.message and b"text/html" in one.message
    plain = provider.prepare(_mail(amount=12))
    assert b"Subject: receipt" in plain.message and b"amount: 12" in plain.message


@pytest.mark.parametrize("bad", [{"subject": "hi\r\nBcc: x@evil.example"}, {"subject": "a\nb"}])
def test_header_injection_is_an_invalid_send(bad: dict[str, object]) -> None:
    provider = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    with pytest.raises(InvalidSendError) as error:
        provider.prepare(_mail(**bad))
    assert error.value.field == "subject"


def test_a_campaigns_list_unsubscribe_headers_travel_in_the_mail() -> None:
    provider = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    headers = {
        "List-Unsubscribe": "<https://shop.example/unsubscribe/t0k>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
    }
    message = provider.prepare(_mail(headers=headers)).message
    assert b"List-Unsubscribe: <https://shop.example/unsubscribe/t0k>" in message
    assert b"List-Unsubscribe-Post: List-Unsubscribe=One-Click" in message


@pytest.mark.parametrize(
    "headers",
    [{"List-Unsubscribe": "<x>\r\nBcc: a@evil.example"}, {"From": "ceo@shop.example"}, ["x"]],
)
def test_headers_that_inject_or_replace_ours_are_an_invalid_send(headers: object) -> None:
    provider = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    with pytest.raises(InvalidSendError) as error:
        provider.prepare(_mail(headers=headers))
    assert error.value.field == "payload_json"


def test_unknown_policy_setting_and_lookup() -> None:
    assert load_settings({}).unknown_outcome == "at_most_once"
    assert load_settings({"MAILBUS_SMTP_UNKNOWN": "at_least_once"}).unknown_outcome == (
        "at_least_once"
    )
    assert load_settings({"MAILBUS_UNKNOWN_OUTCOME": "at_least_once"}).unknown_outcome == (
        "at_least_once"
    )
    with pytest.raises(ConfigError, match="MAILBUS_SMTP_UNKNOWN"):
        load_settings({"MAILBUS_SMTP_UNKNOWN": "exactly_once"})
    with pytest.raises(ConfigError, match="MAILBUS_UNKNOWN_OUTCOME"):
        load_settings({"MAILBUS_UNKNOWN_OUTCOME": "exactly_once"})
    strict = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    assert strict.capability == Capability()  # neither a key nor a look-up
    assert asyncio.run(strict.lookup("k")).failed
