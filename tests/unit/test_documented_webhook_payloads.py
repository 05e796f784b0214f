"""Each provider's documented example webhook payloads (tests/fixtures/webhooks, sources in
its README) go through mailbus's receivers, signed with test keys the provider's way, and
become the events those documents describe (issue 34, item 7)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
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

from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.native.inbound import Inbound
from mailbus.feedback.native.routes import NativeReceiver
from mailbus.providers.mailgun.sandbox import mailgun_signature
from mailbus.providers.mailgun.webhook import Mailgun
from mailbus.providers.postmark.sandbox import basic_authorization
from mailbus.providers.postmark.webhook import Postmark
from mailbus.providers.resend.sandbox import svix_headers
from mailbus.providers.resend.webhook import Resend
from mailbus.providers.sendgrid.sandbox import sendgrid_headers
from mailbus.providers.sendgrid.webhook import SendGrid
from mailbus.providers.ses import events as sns
from mailbus.providers.ses.sandbox import sns_signed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "webhooks"
CASES = json.loads((FIXTURES / "cases.json").read_text())
RESEND_SECRET = "whsec_" + base64.b64encode(b"documented-payloads-0123456789ab").decode()
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()
MAILGUN_KEY = "key-documented-0123"
POSTMARK = ("hooks", "documented")
SNS_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-events"


def signed(name: str, document: Any, now: int) -> tuple[bytes, dict[str, str]]:
    """The fixture as its provider would post it at ``now``."""
    if name.startswith("mailgun_"):
        token = hashlib.sha256(name.encode()).hexdigest()[:50]
        body = {"signature": mailgun_signature(MAILGUN_KEY, now, token), "event-data": document}
        return json.dumps(body).encode(), {}
    raw = json.dumps(document).encode()
    if name.startswith("sendgrid_"):
        return raw, sendgrid_headers(SENDGRID_KEY, raw, now)
    if name.startswith("resend_"):
        return raw, svix_headers(RESEND_SECRET, f"msg_{name}", now, raw)
    return raw, {"Authorization": basic_authorization(*POSTMARK)}


RECEIVERS: dict[str, NativeReceiver] = {
    "mailgun": Mailgun(MAILGUN_KEY),
    "sendgrid": SendGrid(SENDGRID_PUBLIC),
    "resend": Resend(RESEND_SECRET),
    "postmark": Postmark(":".join(POSTMARK)),
}


def through_receiver(name: str, document: Any) -> Inbound:
    receiver = RECEIVERS[name.split("_", 1)[0]]
    body, headers = signed(name, document, int(time.time()))

    async def run() -> Inbound:
        verdict = await receiver.verify(headers, body)
        assert verdict.ok, verdict
        return await receiver.parse(headers, body)

    return asyncio.run(run())


def through_sns(document: Any) -> Inbound:
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    pem = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(SNS_KEY.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(SNS_KEY, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    message = {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": TOPIC,
        "Message": json.dumps(document),
        "Timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService.pem",
    }
    envelope = sns.envelope(json.dumps(sns_signed(message, SNS_KEY)).encode())
    assert envelope is not None
    assert sns.check_signature(envelope, pem, now).ok
    return sns.parse(envelope)


def outcome(event: DeliveryEvent) -> list[Any]:
    return [event.type, event.bounce, event.reason]


@pytest.mark.parametrize("name", sorted(CASES["expected"]))
def test_a_documented_payload_becomes_the_event_its_document_describes(name: str) -> None:
    document = json.loads((FIXTURES / name).read_text())
    inbound = through_sns(document) if name.startswith("ses_") else through_receiver(name, document)
    assert [outcome(e) for e in inbound.events] == CASES["expected"][name]
    assert inbound.skipped == CASES["skipped"].get(name, 0)
    assert inbound.invalid == 0


def test_documented_drops_for_listed_addresses_suppress_with_their_scope() -> None:
    sendgrid = through_receiver(
        "sendgrid_batch.json", json.loads((FIXTURES / "sendgrid_batch.json").read_text())
    )
    assert sendgrid.events[0].suppression_reason == "hard_bounce"  # "Bounced Address"
    mailgun = through_receiver(
        "mailgun_permanent_fail.json",
        json.loads((FIXTURES / "mailgun_permanent_fail.json").read_text()),
    )
    assert mailgun.events[0].suppression_reason == "hard_bounce"  # suppress-bounce, 605
