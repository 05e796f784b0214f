"""The SES adapter through the real AWS SDK against moto's server mode: accepted (and in
moto's sent-mail record), a rejected sender, and a call that gets no reply in time."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from moto_ses import CREDENTIALS, REGION, MotoSes, moto_ses

from mailbus.consumer.core.outcome import SENDER as SENDER_STATE
from mailbus.consumer.core.outcome import Outcome
from mailbus.consumer.core.smtp_outcome import classify_call
from mailbus.consumer.provider import OutgoingMail
from mailbus.providers.ses.sending import SesProvider

SENDER = "shop@example.com"
MAIL = OutgoingMail("order-9-confirmation", "ana@example.com", "order", {"subject": "Order 9"})


@pytest.fixture(scope="module")
def ses() -> Iterator[MotoSes]:
    with moto_ses() as server:
        server.verify(SENDER)
        yield server


def _send(url: str, sender: str = SENDER, request_timeout: float = 5.0):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        provider = SesProvider(
            sender,
            region=REGION,
            endpoint_url=url,
            access_key_id=CREDENTIALS["aws_access_key_id"],
            secret_access_key=CREDENTIALS["aws_secret_access_key"],
            connect_timeout=1.0,
            request_timeout=request_timeout,
            max_connections=2,
        )
        try:
            return classify_call(await provider.send(MAIL))
        finally:
            await provider.aclose()

    return asyncio.run(main())


def test_accepted_mail_is_in_moto_with_the_stored_id(ses: MotoSes) -> None:
    result = _send(ses.url)
    assert result.outcome is Outcome.ACCEPTED, result
    [held] = [m for m in ses.sent() if m["id"] == result.message_id]
    assert held["destinations"]["ToAddresses"] == ["ana@example.com"]
    assert (held["source"], held["subject"]) == (SENDER, "Order 9")


def test_an_unverified_sender_is_the_providers_state_and_nothing_is_sent(ses: MotoSes) -> None:
    """SES names our From address as not verified: the sender identity's state (retried,
    the breaker fed, no attempt spent), never a recipient's ``failed``."""
    before = len(ses.sent())
    result = _send(ses.url, sender="Shop <nobody@unverified.example>")
    assert (result.outcome, result.server_stage) == (Outcome.RETRY, SENDER_STATE), result
    assert "MessageRejected" in result.reason
    assert len(ses.sent()) == before


def test_no_reply_in_time_is_unknown_and_the_sdk_does_not_resend() -> None:
    """A server that reads the request and never answers: the call is in doubt, and with
    the SDK's retries off it was made once (botocore's default would have made it again)."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []
    held: list[socket.socket] = []

    def swallow() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            requests.append(conn.recv(65536))  # read, never answer; keep it open

    threading.Thread(target=swallow, daemon=True).start()
    try:
        result = _send(f"http://127.0.0.1:{listener.getsockname()[1]}", request_timeout=0.5)
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert result.outcome is Outcome.UNKNOWN, result
    assert len(requests) == 1
