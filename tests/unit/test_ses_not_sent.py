"""SES: a call that failed before any byte left -- credentials that could not be had,
parameters the SDK refused, a certificate refused in the TLS handshake, a call still
queued for a worker thread at its deadline -- is "not sent", a retry, never an unknown
outcome for an operator; any other TLS error may follow the request: unknown."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    CredentialRetrievalError,
    ParamValidationError,
    PartialCredentialsError,
    SSLError,
    TokenRetrievalError,
)
from urllib3.exceptions import SSLError as Urllib3SSL

from mailbus.consumer.core.outcome import Outcome, TransportFailure, classify
from mailbus.consumer.provider import OutgoingMail
from mailbus.providers.ses.sending import SesProvider

MAIL = OutgoingMail("order-7", "ana@example.com", "order", {"subject": "Hi"})


def tls_error(cause: ssl.SSLError) -> SSLError:
    """botocore's SSLError as botocore/httpsession.py raises it: wrapping urllib3's, which
    wraps the ssl module's error (urllib3/connectionpool.py, any stage of the call)."""
    return SSLError(endpoint_url="https://email.eu-west-1.amazonaws.com", error=Urllib3SSL(cause))


def provider(**options: Any) -> SesProvider:
    return SesProvider(
        "shop@example.com",
        region="eu-west-1",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="secret-example",
        **options,
    )


@pytest.mark.parametrize(
    ("error", "sent"),
    [
        (CredentialRetrievalError(provider="container-role", error_msg="500"), False),
        (PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), False),
        (TokenRetrievalError(provider="sso", error_msg="expired"), False),
        (ParamValidationError(report="Invalid type for parameter Destination"), False),
        (tls_error(ssl.SSLCertVerificationError(1, "certificate verify failed")), False),
        # urllib3 raises a TLS error while reading the reply, after the request went out,
        # as the same SSLError: maybe sent, never retried blindly (no key at SES)
        (tls_error(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")), True),
        (ConnectionClosedError(endpoint_url="https://email.eu-west-1.amazonaws.com"), True),
    ],
)
def test_errors_raised_before_sending_are_not_sent(error: Exception, sent: bool) -> None:
    ses = provider()

    def send_email(**_arguments: Any) -> dict[str, Any]:
        raise error

    ses._client.send_email = send_email  # type: ignore[method-assign]
    result = asyncio.run(ses.send(MAIL))
    assert isinstance(result, TransportFailure) and result.request_sent is sent
    assert classify(result).outcome is (Outcome.UNKNOWN if sent else Outcome.RETRY)


def test_a_call_queued_behind_a_stuck_thread_is_not_sent() -> None:
    """One worker thread, stuck in a call past its deadline: the permit is free again, the
    next call waits in the executor's queue until its own deadline and is given up there.
    It is "not sent" (a retry), and it never runs later when the thread comes free."""
    ses = provider(connect_timeout=0.1, request_timeout=0.1, max_connections=1)
    release = threading.Event()
    calls: list[str] = []

    def send_email(**arguments: Any) -> dict[str, Any]:
        calls.append(arguments["Destination"]["ToAddresses"][0])
        release.wait(10)
        return {"MessageId": "m-1", "ResponseMetadata": {"HTTPStatusCode": 200}}

    ses._client.send_email = send_email  # type: ignore[method-assign]

    async def scenario() -> tuple[Any, Any]:
        first = await ses.send(MAIL)  # started, then its deadline passed: maybe sent
        second = await ses.send(OutgoingMail("order-8", "bo@example.com", "order", {}))
        release.set()
        await asyncio.sleep(0.3)  # the thread is free: the given-up call must not run
        return first, second

    first, second = asyncio.run(scenario())
    assert isinstance(first, TransportFailure) and first.request_sent
    assert isinstance(second, TransportFailure) and not second.request_sent
    assert calls == ["ana@example.com"]
