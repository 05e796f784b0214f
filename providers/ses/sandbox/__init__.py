"""The sandbox's imitation of SES: no send endpoint (SES is run against moto's emulator,
tests/moto_ses.py), only its delivery events through SNS: a ``Notification`` whose
``Message`` is the SES event (``Delivery``, ``Bounce`` with ``bounceType``
``Permanent``/``Transient``, ``Complaint``), its ``MessageId`` a UUID derived from the
event id (SNS keeps it across retries), signed with version 2
(https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html):
RSA PKCS#1 v1.5 over the canonical string, SHA1 (version 1) or SHA256 (version 2)
(https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
"""

from __future__ import annotations

import argparse
import base64
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from mailbus.kernel.errors import ConfigError
from mailbus.providers.sandbox.dialect import Imitation
from mailbus.providers.sandbox.events import (
    JSON,
    Event,
    Signed,
    body_of,
    private_key,
)

__all__ = ["IMITATION", "SesSigner", "sns_signed"]


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


@dataclass(frozen=True)
class SesSigner:
    """SES events published to ``topic_arn``, signed by ``key``, whose certificate is
    served (over https) at ``cert_url``."""

    topic_arn: str
    cert_url: str
    key: rsa.RSAPrivateKey

    def sign(self, event: Event, to: str, now: int) -> Signed:
        at = event["occurred_at"]
        ses: dict[str, Any] = {
            "mail": {"messageId": event["message_id"], "timestamp": at, "destination": [to]}
        }
        if event["type"] == "delivered":
            ses |= {"eventType": "Delivery", "delivery": {"timestamp": at, "recipients": [to]}}
        elif event["type"] == "bounced":
            ses["eventType"] = "Bounce"
            ses["bounce"] = {
                "bounceType": "Permanent" if event["bounce"] == "hard" else "Transient",
                "bounceSubType": "General",
                "timestamp": at,
                "bouncedRecipients": [{"emailAddress": to}],
            }
        else:
            complaint = {"timestamp": at, "complainedRecipients": [{"emailAddress": to}]}
            ses |= {"eventType": "Complaint", "complaint": complaint}
        sent = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        message = {
            "Type": "Notification",
            "MessageId": str(uuid.uuid5(uuid.NAMESPACE_URL, event["id"])),
            "TopicArn": self.topic_arn,
            "Message": json.dumps(ses),
            "Timestamp": sent,
            "SigningCertURL": self.cert_url,
        }
        return Signed(body_of(sns_signed(message, self.key, "2")), JSON.copy())


def signer(args: argparse.Namespace) -> SesSigner | None:
    """SES's events through SNS, with ``--ses-signing-key``, ``--ses-cert-url`` and
    ``--ses-topic-arn`` given (one without the others is a ConfigError)."""
    ses = (args.ses_signing_key, args.ses_cert_url, args.ses_topic_arn)
    if not any(ses):
        return None
    if not all(ses):
        missing = ("--ses-signing-key", "--ses-cert-url", "--ses-topic-arn")
        name = next(n for n, v in zip(missing, ses, strict=True) if not v)
        raise ConfigError(name, "SES events need the signing key, cert URL and topic ARN")
    key = private_key("--ses-signing-key", args.ses_signing_key)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigError("--ses-signing-key", "must be an RSA private key")
    if not args.ses_cert_url.startswith("https://"):
        raise ConfigError("--ses-cert-url", "SNS certificates are served over https")
    return SesSigner(args.ses_topic_arn, args.ses_cert_url, key)


def options(events: argparse._ArgumentGroup) -> None:
    events.add_argument(
        "--ses-signing-key", metavar="PEM", help="RSA private key of SNS's signing certificate"
    )
    events.add_argument(
        "--ses-cert-url", metavar="URL", help="https URL serving that certificate (SigningCertURL)"
    )
    events.add_argument("--ses-topic-arn", metavar="ARN", help="the SNS topic SES publishes to")


IMITATION = Imitation({}, signer=signer, options=options)
