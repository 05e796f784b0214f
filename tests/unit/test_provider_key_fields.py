"""Where the provider key travels, per adapter (docs/providers.md#the-key-the-provider-sees):
every field a provider dedupes, finds or reports a mail by carries the row's provider key,
checked and encoded as that provider documents, on the final key (prefix and life
included)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from mailbus.consumer.provider import MailbusDialect, OutgoingMail
from mailbus.kernel.errors import InvalidSendError
from mailbus.kernel.provider_key import provider_key
from mailbus.providers.mailgun.sending import MailgunDialect
from mailbus.providers.postmark.sending import PostmarkDialect
from mailbus.providers.resend.sending import ResendDialect
from mailbus.providers.sendgrid.sending import SendGridDialect
from mailbus.providers.ses.sending import SesProvider, key_tag
from mailbus.providers.smtp.sending import SmtpProvider

KEY = provider_key("stg:", "order-7", 2)  # "stg:order-7~2"
MAIL = OutgoingMail(KEY, "ana@example.com", "welcome", {"subject": "Hi"})


def _json(body: bytes | None) -> dict[str, object]:
    document = json.loads(body or b"")
    assert isinstance(document, dict)
    return document


def test_the_http_dialect_sends_and_looks_up_the_provider_key() -> None:
    dialect = MailbusDialect()
    assert dialect.encode(MAIL).headers["Idempotency-Key"] == "stg:order-7~2"
    assert dialect.lookup_request(KEY).params == {"idempotency_key": "stg:order-7~2"}


def test_resend_checks_the_final_key() -> None:
    resend = ResendDialect("shop@example.com")
    assert resend.encode(MAIL).headers["Idempotency-Key"] == "stg:order-7~2"
    fits = provider_key("stg:", "k" * 250, 2)  # 256 characters: Resend's limit
    assert (
        resend.encode(OutgoingMail(fits, "a@example.com", "t", {})).headers["Idempotency-Key"]
        == fits
    )
    too_long = provider_key("stg:", "k" * 251, 2)  # the dedupe key fits, the key does not
    with pytest.raises(InvalidSendError) as error:
        resend.encode(OutgoingMail(too_long, "a@example.com", "t", {}))
    assert error.value.field == "dedupe_key"


def test_postmark_carries_and_searches_the_provider_key() -> None:
    postmark = PostmarkDialect("shop@example.com")
    assert _json(postmark.encode(MAIL).body)["Metadata"] == {"mailbus_key": "stg:order-7~2"}
    assert postmark.lookup_request(KEY).params == {
        "count": "500",
        "offset": "0",
        "metadata_mailbus_key": "stg:order-7~2",
    }
    long_key = provider_key("stg:", "k" * 76, 2)  # 82 characters: over a metadata value's 80
    hashed = "sha256:" + hashlib.sha256(long_key.encode()).hexdigest()
    sent = _json(postmark.encode(OutgoingMail(long_key, "a@example.com", "t", {})).body)
    assert sent["Metadata"] == {"mailbus_key": hashed}
    assert (postmark.lookup_request(long_key).params or {})["metadata_mailbus_key"] == hashed


def test_sendgrid_and_mailgun_carry_the_provider_key() -> None:
    sent = _json(SendGridDialect("shop@example.com").encode(MAIL).body)
    assert sent["custom_args"] == {"dedupe_key": "stg:order-7~2"}
    wire = MailgunDialect("shop@mg.example.com", "mg.example.com").encode(MAIL)
    assert b'name="v:dedupe_key"\r\n\r\nstg:order-7~2\r\n' in (wire.body or b"")


@pytest.mark.parametrize(
    ("key", "name", "value"),
    [
        ("order-7_a", "mailbus_key", "order-7_a"),  # letters, digits, _ and -: as it is
        ("stg:order-7~2", "mailbus_key_b32", "ON2GOOTPOJSGK4RNG57DE"),
        ("k" * 256, "mailbus_key", "k" * 256),
        ("ключ", "mailbus_key_b32", None),
        ("k:" * 81, "mailbus_key_sha256", hashlib.sha256(b"k:" * 81).hexdigest()),
    ],
)
def test_ses_tags_the_provider_key_in_the_characters_a_tag_allows(
    key: str, name: str, value: str | None
) -> None:
    tag = key_tag(key)
    assert tag["Name"] == name
    assert len(tag["Value"]) <= 256
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in tag["Value"])
    if value is not None:
        assert tag["Value"] == value.lower()
    if name == "mailbus_key_b32":  # readable back to the key
        padded = tag["Value"].upper() + "=" * (-len(tag["Value"]) % 8)
        assert base64.b32decode(padded).decode() == key


def test_ses_sends_the_tag() -> None:
    ses = SesProvider(
        "shop@example.com", region="eu-west-1", access_key_id="a", secret_access_key="b"
    )
    assert ses.prepare(MAIL).arguments["EmailTags"] == [key_tag(KEY)]


def test_smtp_gives_each_life_its_own_message_id() -> None:
    smtp = SmtpProvider("smtp://127.0.0.1:1", "noreply@shop.example")
    first = smtp.prepare(OutgoingMail("order-7", "a@example.com", "t", {"subject": "s"}))
    again = smtp.prepare(OutgoingMail("order-7~2", "a@example.com", "t", {"subject": "s"}))
    assert first.message_id != again.message_id
