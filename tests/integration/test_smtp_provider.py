"""The SMTP adapter against a real SMTP server (aiosmtpd): every reply becomes its outcome;
the server's own state (greeting, AUTH, MAIL, refused) is never the recipient's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from smtp_server import SmtpRecorder, free_port, smtp_server

from mailbus.consumer.core.domains import domain_throttled
from mailbus.consumer.core.outcome import Outcome, TransportFailure
from mailbus.consumer.core.smtp_outcome import SmtpDown, SmtpReply, classify_call
from mailbus.consumer.provider import OutgoingMail
from mailbus.providers.smtp.sending import SmtpProvider, message_id_for


@pytest.fixture
def server() -> Iterator[tuple[str, SmtpRecorder]]:
    with smtp_server() as running:
        yield running


def _send(url: str, *recipients: str, password: str = "") -> list[object]:
    async def run() -> list[object]:
        provider = SmtpProvider(
            url,
            "noreply@shop.example",
            request_timeout=5,
            password=password,
            allow_plaintext_auth=True,  # a local test server without TLS
        )
        try:
            results = []
            for to in recipients:
                prepared = provider.prepare(OutgoingMail(f"key-{to}", to, "welcome", {"n": 1}))
                results.append(await provider.send(prepared))
            results.append(await provider.lookup("anything"))
            return results
        finally:
            await provider.aclose()

    return asyncio.run(run())


def test_each_reply_is_classified_with_its_codes(server: tuple[str, SmtpRecorder]) -> None:
    url, recorder = server
    recipients = [
        "ok-1@example.com",
        "rcpt421-1@example.com",
        "rcpt452-1@example.com",
        "rcpt550-1@example.com",
        "data451-1@example.com",
        "ok-2@example.com",  # after the failures: a kept or a fresh connection still works
    ]
    *results, lookup = _send(url, *recipients)
    seen = [(c.outcome, c.provider_code) for c in map(classify_call, results)]  # type: ignore[arg-type]
    assert seen == [
        (Outcome.ACCEPTED, "250 2.0.0"),
        (Outcome.RETRY, "421 4.3.2"),
        (Outcome.RETRY, "452 4.5.3"),
        (Outcome.REJECTED, "550 5.1.1"),
        (Outcome.RETRY, "451 4.3.0"),
        (Outcome.ACCEPTED, "250 2.0.0"),
    ]
    accepted = classify_call(results[0])  # type: ignore[arg-type]
    assert accepted.message_id is not None and accepted.message_id.startswith("Q")
    ours = message_id_for("key-ok-1@example.com", "shop.example")
    assert recorder.messages[ours] == 1
    assert sum(recorder.messages.values()) == 2
    assert lookup.failed and lookup.message_id is None  # type: ignore[attr-defined]


def test_a_connection_dropped_after_data_is_unknown(server: tuple[str, SmtpRecorder]) -> None:
    url, recorder = server
    [result, _] = _send(url, "drop-1@example.com")
    assert isinstance(result, TransportFailure) and result.request_sent
    assert classify_call(result).outcome is Outcome.UNKNOWN
    assert recorder.data_seen[message_id_for("key-drop-1@example.com", "shop.example")] == 1


def test_a_refused_connection_is_the_servers_state_not_sent() -> None:
    [result, _] = _send(f"smtp://127.0.0.1:{free_port()}", "ok@example.com")
    assert isinstance(result, SmtpDown) and result.stage == "connect"
    verdict = classify_call(result)
    assert (verdict.outcome, verdict.server_stage) == (Outcome.RETRY, "connect")


def _server_verdicts(results: list[object]) -> list[tuple[str, int, Outcome, str | None]]:
    seen = []
    for result in results:
        assert isinstance(result, SmtpReply), result
        verdict = classify_call(result)
        assert not domain_throttled(verdict)  # never the recipient domain's fault
        seen.append((result.stage, result.code, verdict.outcome, verdict.server_stage))
    return seen


def test_a_refusing_greeting_is_the_servers_state(server: tuple[str, SmtpRecorder]) -> None:
    url, recorder = server
    recorder.greeting = "421 4.7.0 too many connections"
    *refused, _ = _send(url, "ok-1@example.com", "ok-2@example.org")
    assert _server_verdicts(refused) == [("connect", 421, Outcome.RETRY, "connect")] * 2
    assert classify_call(refused[0]).provider_code == "421 4.7.0"  # type: ignore[arg-type]
    recorder.greeting = None
    [accepted, _] = _send(url, "ok-1@example.com")
    assert classify_call(accepted).outcome is Outcome.ACCEPTED  # type: ignore[arg-type]
    assert recorder.refused["greeting"] == 2 and sum(recorder.messages.values()) == 1


def test_a_refused_password_and_a_missing_login_are_the_servers_state() -> None:
    with smtp_server(password="rotated") as (url, recorder):
        host = url.removeprefix("smtp://")
        [wrong, _] = _send(f"smtp://mailer@{host}", "ok-1@example.com", password="old")
        [anonymous, _] = _send(url, "ok-1@example.com")  # no user: 530 to MAIL
        [right, _] = _send(f"smtp://mailer@{host}", "ok-1@example.com", password="rotated")
        assert _server_verdicts([wrong, anonymous]) == [
            ("auth", 535, Outcome.RETRY, "auth"),
            ("mail", 530, Outcome.RETRY, "mail"),
        ]
        assert classify_call(right).outcome is Outcome.ACCEPTED  # type: ignore[arg-type]
        assert recorder.refused["auth"] >= 1 and sum(recorder.messages.values()) == 1
