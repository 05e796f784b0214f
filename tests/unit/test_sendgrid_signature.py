"""SendGrid's Event Webhook signature, checked with ``cryptography`` alone
(providers/sendgrid/events.py), against SendGrid's own SDK as the oracle: on the
documented batch (tests/fixtures/webhooks/sendgrid_batch.json), genuine and forged, both
say the same, and a forged request is refused as a mismatch."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sendgrid.helpers.eventwebhook import EventWebhook

from mailbus.providers.sendgrid.events import Verifier
from mailbus.providers.sendgrid.sandbox import sendgrid_headers

BODY = (Path(__file__).parents[1] / "fixtures" / "webhooks" / "sendgrid_batch.json").read_bytes()
STAMP = 1_700_000_000
KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())


def _public(key: ec.EllipticCurvePrivateKey) -> str:
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


def _tampered(body: bytes) -> bytes:
    return body.replace(b"bounce", b"delivered", 1)


CASES = {
    "genuine": (sendgrid_headers(KEY, BODY, STAMP), BODY, "ok"),
    "another key": (sendgrid_headers(OTHER, BODY, STAMP), BODY, "mismatch"),
    "body changed": (sendgrid_headers(KEY, BODY, STAMP), _tampered(BODY), "mismatch"),
    "timestamp changed": (
        {**sendgrid_headers(KEY, BODY, STAMP), "X-Twilio-Email-Event-Webhook-Timestamp": "1"},
        BODY,
        "mismatch",
    ),
    "signature truncated": (
        {
            **sendgrid_headers(KEY, BODY, STAMP),
            "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(b"\x30\x06").decode(),
        },
        BODY,
        "mismatch",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_agrees_with_sendgrids_sdk(case: str) -> None:
    headers, body, expected = CASES[case]
    signature = headers["X-Twilio-Email-Event-Webhook-Signature"]
    stamp = headers["X-Twilio-Email-Event-Webhook-Timestamp"]
    theirs = EventWebhook(_public(KEY)).verify_signature(body.decode(), signature, stamp)
    verdict = Verifier(_public(KEY)).verify(headers, body, now=float(stamp))
    assert theirs is (expected == "ok")
    assert verdict.ok is theirs
    assert (verdict.reason or "ok") == expected


def test_a_signature_that_is_not_base64_is_malformed() -> None:
    headers = {**sendgrid_headers(KEY, BODY, STAMP)}
    headers["X-Twilio-Email-Event-Webhook-Signature"] = "not base64!"
    assert Verifier(_public(KEY)).verify(headers, BODY, now=STAMP).reason == "malformed"


@pytest.mark.parametrize("key", ["", "not base64!", base64.b64encode(b"not a key").decode()])
def test_a_key_that_is_not_an_ec_public_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not a SendGrid verification key"):
        Verifier(key)
