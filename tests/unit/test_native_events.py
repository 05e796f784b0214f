"""The sandbox's provider-native delivery events, read back by mailbus's own receivers:
each provider's events verify its way (with the providers' libraries where mailbus uses
them) and parse into the event the sandbox meant, with a stable event id."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from svix.webhooks import Webhook

from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.native.routes import NativeReceiver
from mailbus.kernel.errors import ConfigError
from mailbus.providers.mailgun import events as mailgun_events
from mailbus.providers.mailgun.sandbox import MailgunSigner
from mailbus.providers.mailgun.webhook import Mailgun
from mailbus.providers.postmark.sandbox import PostmarkSigner
from mailbus.providers.postmark.webhook import Postmark
from mailbus.providers.resend import events as resend_events
from mailbus.providers.resend.sandbox import ResendSigner, svix_headers
from mailbus.providers.resend.webhook import Resend
from mailbus.providers.sandbox.events import Signer
from mailbus.providers.sendgrid import events as sendgrid_events
from mailbus.providers.sendgrid.sandbox import SendGridSigner
from mailbus.providers.sendgrid.webhook import SendGrid
from mailbus.providers.ses import events as sns
from mailbus.providers.ses.sandbox import SesSigner
from mailbus.sandbox.emitter import emitter_from_args
from mailbus.sandbox.server import add_arguments


def now() -> int:
    """The time to sign at: svix checks times against its own clock, so a time taken once at
    collection would be stale for a test run minutes later."""
    return int(time.time())


AT = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
TO = "Ana@Example.com"
RESEND_SECRET = "whsec_" + base64.b64encode(b"resend-unit-secret-0123456789abc").decode()
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
SNS_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
TOPIC = "arn:aws:sns:eu-west-1:123456789012:mailbus-ses"

EVENTS = [
    ({"type": "delivered"}, ("delivered", None)),
    ({"type": "bounced", "bounce": "hard"}, ("bounced", "hard")),
    ({"type": "complained"}, ("complained", None)),
]
# what each provider makes of a soft bounce: Mailgun calls it a temporary failure
SOFT = {"mailgun": ("deferred", None)}

PAIRS: dict[str, tuple[Signer, NativeReceiver]] = {
    "resend": (ResendSigner(RESEND_SECRET), Resend(RESEND_SECRET, clock=now)),
    "sendgrid": (SendGridSigner(SENDGRID_KEY), SendGrid(SENDGRID_PUBLIC, clock=now)),
    "mailgun": (MailgunSigner("key-unit"), Mailgun("key-unit", clock=now)),
    "postmark": (PostmarkSigner("hooks", "pa:ss"), Postmark("hooks:pa:ss")),
}


def sandbox_event(n: int, **fields: str) -> dict[str, str]:
    return {
        "id": f"sandbox-msg_1-{n}",
        "message_id": "msg_1",
        "occurred_at": (AT + timedelta(seconds=n)).isoformat(),
        **fields,
    }


def received(signer: Signer, receiver: NativeReceiver, event: dict[str, str], now: int) -> Any:
    signed = signer.sign(event, TO, now)

    async def read() -> tuple[bool, tuple[DeliveryEvent, ...]]:
        verdict = await receiver.verify(signed.headers, signed.body)
        if not verdict.ok:
            return False, ()
        return True, (await receiver.parse(signed.headers, signed.body)).events

    return asyncio.run(read())


@pytest.mark.parametrize("provider", sorted(PAIRS))
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_each_providers_events_verify_and_parse_into_the_sandboxs_event(
    provider: str, n: int
) -> None:
    signed_at = now()
    signer, receiver = PAIRS[provider]
    soft = SOFT.get(provider, ("bounced", "soft"))
    fields, expected = (*EVENTS, ({"type": "bounced", "bounce": "soft"}, soft))[n - 1]
    event = sandbox_event(n, **fields)
    ok, events = received(signer, receiver, event, signed_at)
    assert ok
    [got] = events
    assert (got.type, got.bounce, got.message_id) == (*expected, "msg_1")
    assert got.occurred_at == AT + timedelta(seconds=n)
    # a retry, signed anew a minute later, carries the same event id
    _, again = received(signer, receiver, event, signed_at + 60)
    assert again[0].event_id == got.event_id


FORGERS: dict[str, Signer] = {  # the right format, the wrong secret
    "resend": ResendSigner(
        "whsec_" + base64.b64encode(b"not-the-secret-0123456789abcdef").decode()
    ),
    "sendgrid": SendGridSigner(ec.generate_private_key(ec.SECP256R1())),
    "mailgun": MailgunSigner("key-guess"),
    "postmark": PostmarkSigner("hooks", "guess"),
}


@pytest.mark.parametrize("provider", sorted(PAIRS))
def test_a_forged_or_stale_native_event_does_not_verify(provider: str) -> None:
    signed_at = now()
    signer, receiver = PAIRS[provider]
    forged = FORGERS[provider].sign(sandbox_event(1, type="delivered"), TO, signed_at)
    assert asyncio.run(receiver.verify(forged.headers, forged.body)).reason == "mismatch"
    if provider != "postmark":  # Postmark signs no time: nothing is stale
        past = TOLERANCE[provider] + 100
        old = signer.sign(sandbox_event(1, type="delivered"), TO, signed_at - past)
        assert asyncio.run(receiver.verify(old.headers, old.body)).reason == "stale"


# Each provider's tolerance fits its retry schedule (review #15): Mailgun retries for 8 h,
# SendGrid for 24 h, neither says a retry is signed anew; Svix signs every attempt.
TOLERANCE = {
    "mailgun": mailgun_events.TOLERANCE_S,
    "sendgrid": sendgrid_events.TOLERANCE_S,
    "resend": resend_events.TOLERANCE_S,
}


def test_tolerances_cover_each_providers_retry_schedule() -> None:
    assert mailgun_events.TOLERANCE_S >= (10 + 10 + 15 + 30 + 60 + 120 + 240) * 60
    assert sendgrid_events.TOLERANCE_S >= 24 * 3600
    assert resend_events.TOLERANCE_S == 300  # svix's own: every retry is signed anew


def test_ses_events_are_sns_notifications_signed_by_the_certificates_key() -> None:
    signed_at = now()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(SNS_KEY.public_key())
        .serial_number(1)
        .not_valid_before(AT - timedelta(days=1))
        .not_valid_after(AT + timedelta(days=30000))
        .sign(SNS_KEY, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    signer = SesSigner(TOPIC, "https://127.0.0.1/cert.pem", SNS_KEY)
    checked_at = datetime.fromtimestamp(signed_at, UTC)
    for n, (fields, (kind, bounce)) in enumerate(EVENTS, 1):
        event = sandbox_event(n, **fields)
        message = sns.envelope(signer.sign(event, TO, signed_at).body)
        assert message is not None and message["TopicArn"] == TOPIC
        assert sns.check_signature(message, pem, checked_at).ok
        [got] = sns.parse(message).events
        assert (got.type, got.bounce, got.message_id) == (kind, bounce, "msg_1")
        retried = sns.envelope(signer.sign(event, TO, signed_at + 60).body)
        assert retried is not None and retried["MessageId"] == message["MessageId"]
        forged = {**message, "Message": message["Message"].replace("msg_1", "msg_2")}
        assert sns.check_signature(forged, pem, checked_at).reason == "mismatch"


def test_the_sandboxs_svix_signature_is_the_svix_librarys_own() -> None:
    """Resend's imitation writes Svix's scheme from its document; the library agrees."""
    signed_at = now()
    body = json.dumps({"type": "email.delivered"}).encode()
    ours = svix_headers(RESEND_SECRET, "msg_x", signed_at, body)["svix-signature"]
    theirs = Webhook(RESEND_SECRET).sign(
        "msg_x", datetime.fromtimestamp(signed_at, UTC), body.decode()
    )
    assert ours == theirs


def sandbox_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_native_routes_follow_the_secrets_and_keys_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("RESEND_WEBHOOK_SECRET", "MAILGUN_WEBHOOK_KEY", "POSTMARK_WEBHOOK_AUTH"):
        monkeypatch.delenv(f"MAILBUS_{name}", raising=False)
        monkeypatch.delenv(f"MAILBUS_{name}_FILE", raising=False)
    base = ("--native-events-to", "http://127.0.0.1:8026/webhooks/")
    with pytest.raises(ConfigError, match="--native-events-to"):
        emitter_from_args(sandbox_args(*base))
    monkeypatch.setenv("MAILBUS_MAILGUN_WEBHOOK_KEY", "key-x")
    (tmp_path / "auth").write_text("hooks:pa:ss\n")
    monkeypatch.setenv("MAILBUS_POSTMARK_WEBHOOK_AUTH_FILE", str(tmp_path / "auth"))
    key = tmp_path / "sendgrid.pem"
    key.write_bytes(
        SENDGRID_KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    emitter = emitter_from_args(sandbox_args(*base, "--sendgrid-signing-key", str(key)))
    assert emitter is not None and emitter.url is None
    assert {name: route.url for name, route in emitter.native.items()} == {
        name: f"http://127.0.0.1:8026/webhooks/{name}"
        for name in ("mailgun", "postmark", "sendgrid")
    }
    assert emitter.native["postmark"].signer == PostmarkSigner("hooks", "pa:ss")
    with pytest.raises(ConfigError, match="--ses-cert-url"):
        emitter_from_args(
            sandbox_args(*base, "--ses-signing-key", str(key), "--ses-topic-arn", TOPIC)
        )
    with pytest.raises(ConfigError, match=r"--ses-signing-key.*RSA"):
        emitter_from_args(
            sandbox_args(
                *base,
                "--ses-signing-key",
                str(key),
                "--ses-topic-arn",
                TOPIC,
                "--ses-cert-url",
                "https://127.0.0.1/c.pem",
            )
        )
