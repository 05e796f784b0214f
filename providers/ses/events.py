"""Amazon SES events through Amazon SNS: the SNS message signature, and the SES event in
its ``Message``, pure (the certificate is fetched by :mod:`mailbus.providers.ses.certificates`).

SNS (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html and
https://docs.aws.amazon.com/sns/latest/dg/http-subscription-confirmation-json.html): the
body is a JSON object of ``Type`` ``Notification``, ``SubscriptionConfirmation`` or
``UnsubscribeConfirmation``; ``Signature`` is the base64 RSA PKCS#1 v1.5 signature, SHA1
for ``SignatureVersion`` 1 and SHA256 for 2, of the string made of ``name\\nvalue\\n`` for
``Message``, ``MessageId``, ``Subject`` (if present), ``Timestamp``, ``TopicArn``, ``Type``
(a notification) or ``Message``, ``MessageId``, ``SubscribeURL``, ``Timestamp``, ``Token``,
``TopicArn``, ``Type`` (the confirmations), by the certificate at ``SigningCertURL``. That
URL must be https on an allowed host (by default ``sns.<region>.amazonaws.com``, also
``.com.cn``), and the ``TopicArn`` one mailbus was told to expect (anyone can have SNS sign
a message of their own topic). A message more than :data:`TOLERANCE_S` old is stale (SNS
retries with the original timestamp for about an hour at most).

SES (https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html
and https://docs.aws.amazon.com/ses/latest/dg/notification-contents.html): ``Message`` is a
JSON object with ``eventType`` (event publishing) or ``notificationType`` (identity
notifications): ``Delivery`` → delivered, ``DeliveryDelay`` → deferred, ``Bounce`` →
bounced (``bounceType`` ``Permanent``: hard, else soft), ``Complaint`` → complained,
``Rendering Failure`` ("the email wasn't sent because of a template rendering issue",
its ``failure.errorMessage`` the reason) and ``Reject`` (SES found a virus; ``reject.reason``)
→ dropped; others skipped. The message is ``mail.messageId`` (what SES answered the send with); the
event id is the SNS ``MessageId`` (kept across SNS retries); the time is the bounce's,
complaint's, delivery's or delay's own ``timestamp``.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from mailbus.feedback.events import InvalidEventError, make_event
from mailbus.feedback.native.inbound import Inbound, json_document
from mailbus.feedback.signature import Verdict

__all__ = [
    "AWS_CERT_HOST",
    "TOLERANCE_S",
    "Envelope",
    "allowed_url",
    "check_signature",
    "envelope",
    "parse",
    "string_to_sign",
]

TOLERANCE_S = 3600
AWS_CERT_HOST = re.compile(r"sns\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?", re.ASCII)
_TYPES = ("Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation")
_NOTIFICATION_KEYS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
_CONFIRMATION_KEYS = (
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
)
_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}
_SES_TYPES = {
    "Delivery": ("delivered", "delivery"),
    "DeliveryDelay": ("deferred", "deliveryDelay"),
    "Bounce": ("bounced", "bounce"),
    "Complaint": ("complained", "complaint"),
    "Rendering Failure": ("dropped", "failure"),
    "Reject": ("dropped", "reject"),
}
_REASONS = {"failure": "errorMessage", "reject": "reason"}

Envelope = dict[str, str]


def envelope(body: bytes) -> Envelope | None:
    """The SNS message's string fields, or None when the body is not an SNS message."""
    try:
        document = json_document(body)
    except InvalidEventError:
        return None
    if not isinstance(document, dict) or document.get("Type") not in _TYPES:
        return None
    return {k: v for k, v in document.items() if isinstance(v, str)}


def allowed_url(url: str, hosts: frozenset[str]) -> bool:
    """Whether ``url`` is https on an allowed host (``hosts``; empty: AWS's SNS hosts)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises ValueError for a malformed port)
    except ValueError:
        return False
    if parts.scheme != "https" or parts.username or parts.password:
        return False
    return host in hosts if hosts else bool(AWS_CERT_HOST.fullmatch(host))


def string_to_sign(message: Envelope) -> bytes:
    keys = _NOTIFICATION_KEYS if message.get("Type") == "Notification" else _CONFIRMATION_KEYS
    return "".join(f"{k}\n{message[k]}\n" for k in keys if k in message).encode()


def check_signature(message: Envelope, certificate_pem: bytes, now: datetime) -> Verdict:
    """Verify ``message`` against the PEM certificate of its ``SigningCertURL``."""
    algorithm = _HASHES.get(message.get("SignatureVersion", ""))
    if algorithm is None or "Signature" not in message or "Timestamp" not in message:
        return Verdict(False, "malformed")
    try:
        signature = base64.b64decode(message["Signature"], validate=True)
        key = x509.load_pem_x509_certificate(certificate_pem).public_key()
    except (binascii.Error, ValueError):
        return Verdict(False, "malformed")
    if not isinstance(key, rsa.RSAPublicKey):
        return Verdict(False, "malformed")
    try:
        key.verify(signature, string_to_sign(message), padding.PKCS1v15(), algorithm())
    except InvalidSignature:
        return Verdict(False, "mismatch")
    try:
        sent = datetime.fromisoformat(message["Timestamp"])
    except ValueError:
        return Verdict(False, "malformed")
    if sent.tzinfo is None or abs((now - sent).total_seconds()) > TOLERANCE_S:
        return Verdict(False, "stale")
    return Verdict(True)


def parse(message: Envelope) -> Inbound:
    """The SES event of a verified notification, or the handshake of a confirmation."""
    if message["Type"] == "SubscriptionConfirmation":
        url = message.get("SubscribeURL")
        if not url:
            raise InvalidEventError("SubscribeURL", "a subscription confirmation needs one")
        return Inbound(subscribe_url=url)
    if message["Type"] != "Notification":
        return Inbound(skipped=1)
    document = json_document(message.get("Message", "").encode())
    if not isinstance(document, dict):
        raise InvalidEventError("Message", "must be an SES event object")
    kind = document.get("eventType", document.get("notificationType"))
    if kind not in _SES_TYPES:
        return Inbound(skipped=1)
    event_type, detail_key = _SES_TYPES[str(kind)]
    detail = document.get(detail_key)
    mail = document.get("mail")
    if not isinstance(detail, dict) or not isinstance(mail, dict):
        raise InvalidEventError(detail_key, "must be an object, beside a mail object")
    bounce = reason = None
    if event_type == "bounced":
        bounce = "hard" if detail.get("bounceType") == "Permanent" else "soft"
    elif event_type == "dropped":
        reason = detail.get(_REASONS[detail_key]) or kind
    return Inbound(
        (
            make_event(
                message.get("MessageId"),
                event_type,
                mail.get("messageId"),
                _timestamp(detail, mail),
                bounce,
                reason=reason,
            ),
        )
    )


def _timestamp(detail: dict[str, Any], mail: dict[str, Any]) -> object:
    return detail.get("timestamp") or mail.get("timestamp")
