"""How each provider signs its delivery events, written from the providers' documents and
independent of the libraries mailbus verifies with (``svix``, ``sendgrid``), so that the
sandbox cannot flatter the verifier. Pure: keys, times and tokens are passed in.

- Svix (Resend): https://docs.svix.com/receiving/verifying-payloads/how-manual —
  ``base64(HMAC-SHA256(base64decode(secret without "whsec_"), "<id>.<t>.<body>"))`` in
  ``svix-signature: v1,<sig>``.
- SendGrid: ECDSA P-256/SHA-256 over ``timestamp + body``, base64 DER signature
  (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features).
- Mailgun: hex HMAC-SHA256 of ``timestamp + token`` under the signing key
  (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks).
- SNS: RSA PKCS#1 v1.5 over the canonical string, SHA1 (version 1) or SHA256 (version 2)
  (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
- Postmark: basic auth credentials in the webhook URL (https://postmarkapp.com/email-webhooks).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

__all__ = [
    "basic_authorization",
    "mailgun_signature",
    "sendgrid_headers",
    "sns_signed",
    "svix_headers",
]

_SNS_NOTIFICATION = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
_SNS_CONFIRMATION = (
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
)


def svix_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {"svix-id": msg_id, "svix-timestamp": str(timestamp), "svix-signature": f"v1,{digest}"}


def sendgrid_headers(
    private_key: ec.EllipticCurvePrivateKey, body: bytes, timestamp: int
) -> dict[str, str]:
    signature = private_key.sign(str(timestamp).encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": str(timestamp),
    }


def mailgun_signature(key: str, timestamp: int, token: str) -> dict[str, str]:
    digest = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {"timestamp": str(timestamp), "token": token, "signature": digest}


def sns_signed(
    message: dict[str, Any], private_key: rsa.RSAPrivateKey, version: str = "2"
) -> dict[str, Any]:
    """``message`` with ``SignatureVersion`` and ``Signature`` added."""
    keys = _SNS_NOTIFICATION if message["Type"] == "Notification" else _SNS_CONFIRMATION
    canonical = "".join(f"{k}\n{message[k]}\n" for k in keys if k in message).encode()
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    signature = private_key.sign(canonical, padding.PKCS1v15(), algorithm)
    return {
        **message,
        "SignatureVersion": version,
        "Signature": base64.b64encode(signature).decode(),
    }


def basic_authorization(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
