"""SendGrid's and Mailgun's replies mapped onto the outcome classes, their requests' shapes,
their rate-limit answers as Retry-After, and the guarantee their capability gives."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from mailbus.consumer.core.capability import (
    Capability,
    Guarantee,
    IdempotencyKey,
    guarantee_of,
    without_cover,
)
from mailbus.consumer.core.outcome import Outcome, classify
from mailbus.consumer.provider import OutgoingMail
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_settings
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.sendgrid.sending import SendGridDialect

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
SENDGRID = SendGridDialect("shop@example.com")
MAILGUN = MailgunDialect("shop@mg.example.com", "mg.example.com")
MAIL = OutgoingMail("order-7-confirmation", "ana@example.com", "order", {"subject": "Hi"})


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (400, Outcome.REJECTED),  # a bad request
        (401, Outcome.RETRY),  # the key: the provider's state (test_account_replies)
        (403, Outcome.RETRY),
        (413, Outcome.REJECTED),  # too large
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (503, Outcome.RETRY),
    ],
)
def test_status_gives_the_outcome(status: int, outcome: Outcome) -> None:
    sendgrid = b'{"errors": [{"message": "m", "field": null, "help": null}]}'
    assert classify(SENDGRID.reply(status, {}, sendgrid, NOW)).outcome is outcome
    assert classify(MAILGUN.reply(status, {}, b'{"message": "m"}', NOW)).outcome is outcome


def test_sendgrid_id_is_the_x_message_id_header() -> None:
    reply = classify(SENDGRID.reply(202, {"X-Message-Id": "abc.1"}, b"", NOW))
    assert (reply.outcome, reply.message_id) == (Outcome.ACCEPTED, "abc.1")
    assert classify(SENDGRID.reply(202, {}, b"", NOW)).outcome is Outcome.UNKNOWN  # no id


def test_mailgun_id_is_stored_without_angle_brackets() -> None:
    body = b'{"id": "<20111114174239.25659.5817@mg.example.com>", "message": "Queued."}'
    reply = classify(MAILGUN.reply(200, {}, body, NOW))
    assert reply.message_id == "20111114174239.25659.5817@mg.example.com"
    assert classify(MAILGUN.reply(200, {}, b'{"id": "<x', NOW)).outcome is Outcome.UNKNOWN


def test_rate_limits_become_retry_after() -> None:
    reset = str(int(NOW.timestamp()) + 30)
    assert SENDGRID.reply(429, {"X-RateLimit-Reset": reset}, b"{}", NOW).retry_after_s == 30
    message = "request limit exceeded, try again after Thu, 03 Dec 2026 12:00:45 UTC"
    body = json.dumps({"message": message}).encode()
    assert MAILGUN.reply(429, {}, body, NOW).retry_after_s == 45
    assert MAILGUN.reply(429, {"Retry-After": "3"}, body, NOW).retry_after_s == 3


def test_error_bodies_are_kept_readably() -> None:
    body = b'{"errors": [{"message": "bad", "field": "subject", "help": null}]}'
    assert SENDGRID.reply(400, {}, body, NOW).error_excerpt == "subject: bad"
    assert MAILGUN.reply(400, {}, b'{"message": "from is missing"}', NOW).error_excerpt == (
        "from is missing"
    )


def test_sendgrid_request_carries_the_dedupe_key_as_a_custom_arg() -> None:
    wire = SENDGRID.encode(MAIL)
    assert (wire.method, wire.path) == ("POST", "v3/mail/send")
    doc = json.loads(wire.body or b"")
    assert doc["personalizations"] == [{"to": [{"email": "ana@example.com"}]}]
    assert doc["custom_args"] == {"dedupe_key": "order-7-confirmation"}
    assert SENDGRID.auth_headers("SG.k") == {"Authorization": "Bearer SG.k"}


def test_mailgun_request_is_a_form_with_basic_auth() -> None:
    wire = MAILGUN.encode(MAIL)
    assert wire.path == "v3/mg.example.com/messages"
    assert wire.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert b'name="v:dedupe_key"\r\n\r\norder-7-confirmation\r\n' in (wire.body or b"")
    token = base64.b64encode(b"api:key-1").decode()
    assert MAILGUN.auth_headers("key-1") == {"Authorization": f"Basic {token}"}
    with pytest.raises(ConfigError):
        MailgunDialect("shop@example.com", "not a domain")


def test_neither_offers_a_key_or_a_look_up() -> None:
    """Neither provider deduplicates or has a look-up mailbus can trust: at most once by
    default, at least once when the operator says so (docs/providers.md)."""
    for dialect in (SENDGRID, MAILGUN):
        assert guarantee_of(dialect.capability, False) is Guarantee.AT_MOST_ONCE
        assert guarantee_of(dialect.capability, True) is Guarantee.AT_LEAST_ONCE


def test_settings_name_each_providers_api_and_what_it_needs() -> None:
    sender = {"MAILBUS_MAIL_FROM": "shop@example.com"}
    sendgrid = load_settings({"MAILBUS_PROVIDER": "sendgrid", **sender})
    assert sendgrid.provider_url == "https://api.sendgrid.com"
    mailgun = {"MAILBUS_PROVIDER": "mailgun", "MAILBUS_MAILGUN_DOMAIN": "mg.example.com"}
    assert load_settings({**mailgun, **sender}).provider_url == "https://api.mailgun.net"
    eu = load_settings({**mailgun, **sender, "MAILBUS_MAILGUN_REGION": "EU"})
    assert (eu.provider_url, eu.mailgun_domain) == ("https://api.eu.mailgun.net", "mg.example.com")
    override = {**mailgun, **sender, "MAILBUS_PROVIDER_URL": "http://127.0.0.1:9"}
    assert load_settings(override).provider_url == "http://127.0.0.1:9"  # tests: the sandbox
    for env, name in [
        ({"MAILBUS_PROVIDER": "sendgrid"}, "MAILBUS_MAIL_FROM"),
        ({"MAILBUS_PROVIDER": "mailgun", **sender}, "MAILBUS_MAILGUN_DOMAIN"),
        ({**mailgun, **sender, "MAILBUS_MAILGUN_REGION": "asia"}, "MAILBUS_MAILGUN_REGION"),
    ]:
        with pytest.raises(ConfigError, match=name):
            load_settings(env)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (500, Outcome.UNKNOWN),
        (502, Outcome.UNKNOWN),
        (504, Outcome.UNKNOWN),
        (503, Outcome.RETRY),
        (429, Outcome.RETRY),
        (400, Outcome.REJECTED),
    ],
)
def test_a_server_error_without_key_or_look_up_is_unknown_not_a_retry(
    status: int, outcome: Outcome
) -> None:
    """A 500/502/504 may follow acceptance: without a key or a look-up a retry could send
    the mail twice, so it is unknown (at most once: an operator's). Only a key kept for
    good covers it; a look-up without a key, or a key that expires, does not (review
    2026-12-06 #2, #4): unknown, looked up or held to the key's window."""
    reply = classify(SENDGRID.reply(status, {}, b"{}", NOW))
    assert without_cover(SENDGRID.capability, reply).outcome is outcome
    forever = Capability(IdempotencyKey("Idempotency-Key", None), look_up=True)
    assert without_cover(forever, reply).outcome is reply.outcome
    for uncovered in (Capability(IdempotencyKey("K", 60.0)), Capability(look_up=True)):
        assert without_cover(uncovered, reply).outcome is outcome
