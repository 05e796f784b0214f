"""Resend's replies mapped onto the outcome classes, and what cannot travel as its key."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from mailbus.consumer.core.outcome import Outcome, classify
from mailbus.consumer.provider import OutgoingMail
from mailbus.kernel.errors import InvalidSendError
from mailbus.providers.resend.sending import ResendDialect

NOW = datetime(2026, 12, 3, tzinfo=UTC)
RESEND = ResendDialect("shop@example.com")


def _reply(status: int, name: str = "", headers: dict[str, str] | None = None) -> Outcome:
    body = json.dumps({"statusCode": status, "name": name, "message": "m"}).encode()
    return classify(RESEND.reply(status, headers or {}, body, NOW)).outcome


@pytest.mark.parametrize(
    ("status", "name", "outcome"),
    [
        (409, "concurrent_idempotent_requests", Outcome.RETRY),  # the first is in progress
        (409, "invalid_idempotent_request", Outcome.REJECTED),  # same key, other body
        (422, "validation_error", Outcome.REJECTED),
        (429, "rate_limit_exceeded", Outcome.RETRY),
        (500, "internal_server_error", Outcome.RETRY),
    ],
)
def test_status_and_error_name_give_the_outcome(status: int, name: str, outcome: Outcome) -> None:
    assert _reply(status, name) is outcome


def test_rate_limit_headers_become_retry_after() -> None:
    body = b'{"name": "rate_limit_exceeded", "message": "slow down"}'
    reply = RESEND.reply(429, {"ratelimit-reset": "4"}, body, NOW)
    assert reply.retry_after_s == 4.0
    assert reply.error_excerpt == "rate_limit_exceeded: slow down"


def test_a_key_longer_than_resend_keeps_fails_at_once() -> None:
    with pytest.raises(InvalidSendError) as error:
        RESEND.encode(OutgoingMail("k" * 257, "ana@example.com", "welcome", {}))
    assert error.value.field == "dedupe_key"
    wire = RESEND.encode(OutgoingMail("k-1", "ana@example.com", "welcome", {"subject": "Hi"}))
    assert wire.headers["Idempotency-Key"] == "k-1"
    assert json.loads(wire.body or b"")["to"] == ["ana@example.com"]
