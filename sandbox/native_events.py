"""The sandbox's delivery events in each provider's own format, signed that provider's way:
what Resend, SendGrid, Mailgun, Postmark and SES (through SNS) post to a webhook, pure.

A :class:`Signer` turns one of the sandbox's events (:mod:`mailbus.sandbox.outcomes`:
``{"id", "type", "message_id", "occurred_at", "bounce"?}``) and its recipient into the
request body and headers, at the time it is posted (``now``, unix seconds: every retry is
signed anew, as a provider's is). The event id is kept across retries and repeats in the
field each provider carries it in, so the receiver applies an event once. Signing is
:mod:`mailbus.sandbox.provider_signing`'s. Payload shapes, from the providers' documents:

* Resend: ``{"type": "email.delivered"|"email.bounced"|"email.complained", "created_at",
  "data": {"email_id", "to", "bounce"?}}``, the event id in ``svix-id``
  (https://resend.com/docs/webhooks/event-types).
* SendGrid: a JSON array of ``{"email", "timestamp", "event": "delivered"|"bounce"|
  "spamreport", "type"?: "bounce"|"blocked", "sg_event_id", "sg_message_id"}``; the message
  id with the ``.filter...`` suffix SendGrid appends
  (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event).
* Mailgun: ``{"signature", "event-data": {"event": "delivered"|"failed"|"complained",
  "severity"?, "reason"?, "id", "timestamp", "recipient", "message": {"headers":
  {"message-id"}}}}``, the ``signature.token`` one per event; a hard bounce is a
  ``permanent`` failure for reason ``bounce``, a soft one a ``temporary`` failure, which
  Mailgun retries
  (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/webhook-payloads).
* Postmark: one record, ``Delivery`` / ``Bounce`` (``HardBounce``/``SoftBounce``) /
  ``SpamComplaint``, its numeric ``ID`` derived from the event id
  (https://postmarkapp.com/developer/webhooks/bounce-webhook).
* SES: an SNS ``Notification`` whose ``Message`` is the SES event (``Delivery``, ``Bounce``
  with ``bounceType`` ``Permanent``/``Transient``, ``Complaint``), its ``MessageId`` a
  UUID derived from the event id (SNS keeps it across retries), signed with version 2
  (https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-sns-contents.html).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mailbus.feedback.signature import signature_header
from mailbus.sandbox.provider_signing import (
    basic_authorization,
    mailgun_signature,
    sendgrid_headers,
    sns_signed,
    svix_headers,
)

__all__ = [
    "MailbusSigner",
    "MailgunSigner",
    "PostmarkSigner",
    "ResendSigner",
    "SendGridSigner",
    "SesSigner",
    "Signed",
    "Signer",
]

JSON = {"Content-Type": "application/json"}

Event = dict[str, Any]


@dataclass(frozen=True)
class Signed:
    body: bytes
    headers: dict[str, str]


class Signer(Protocol):
    def sign(self, event: Event, to: str, now: int) -> Signed: ...


def _body(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _unix(event: Event) -> float:
    return datetime.fromisoformat(event["occurred_at"]).timestamp()


def _number(event: Event) -> int:
    """A stable positive number for the event id (Postmark's records have numeric ids)."""
    return int.from_bytes(hashlib.sha256(event["id"].encode()).digest()[:6], "big")


@dataclass(frozen=True)
class MailbusSigner:
    """mailbus's own events (docs/reference/contract.md#delivery-events) to ``path``."""

    secret: str
    path: str

    def sign(self, event: Event, to: str, now: int) -> Signed:
        body = json.dumps(event).encode()
        header = signature_header(self.secret, self.path, body, now)
        return Signed(body, {"Mailbus-Signature": header, **JSON})


_RESEND_TYPES = {"delivered": "email.delivered", "bounced": "email.bounced"}


@dataclass(frozen=True)
class ResendSigner:
    secret: str  # whsec_...

    def sign(self, event: Event, to: str, now: int) -> Signed:
        data: dict[str, Any] = {"email_id": event["message_id"], "to": [to]}
        if event["type"] == "bounced":
            kind = "Permanent" if event["bounce"] == "hard" else "Transient"
            data["bounce"] = {"type": kind, "subType": "General", "message": "sandbox"}
        kind = _RESEND_TYPES.get(event["type"], "email.complained")
        body = _body({"type": kind, "created_at": event["occurred_at"], "data": data})
        return Signed(body, {**svix_headers(self.secret, event["id"], now, body), **JSON})


@dataclass(frozen=True)
class SendGridSigner:
    key: ec.EllipticCurvePrivateKey

    def sign(self, event: Event, to: str, now: int) -> Signed:
        item: dict[str, Any] = {
            "email": to,
            "timestamp": int(_unix(event)),
            "sg_event_id": event["id"],
            "sg_message_id": f"{event['message_id']}.filter0001.16648.5515E0B88.0",
        }
        if event["type"] == "bounced":
            kind = "bounce" if event["bounce"] == "hard" else "blocked"
            item |= {"event": "bounce", "type": kind}
        else:
            item["event"] = "delivered" if event["type"] == "delivered" else "spamreport"
        body = _body([item])
        return Signed(body, {**sendgrid_headers(self.key, body, now), **JSON})


@dataclass(frozen=True)
class MailgunSigner:
    key: str  # the HTTP webhook signing key

    def sign(self, event: Event, to: str, now: int) -> Signed:
        data: dict[str, Any] = {
            "id": event["id"],
            "timestamp": _unix(event),
            "recipient": to,
            "message": {"headers": {"message-id": event["message_id"]}},
        }
        if event["type"] == "bounced":
            hard = event["bounce"] == "hard"
            data |= {
                "event": "failed",
                "severity": "permanent" if hard else "temporary",
                "reason": "bounce" if hard else "generic",
            }
        else:
            data["event"] = event["type"]  # delivered, complained
        # one token per event, kept across repeats (the receiver's event id); a new
        # timestamp and signature each time it is posted
        token = hashlib.sha256(event["id"].encode()).hexdigest()[:50]
        body = _body({"signature": mailgun_signature(self.key, now, token), "event-data": data})
        return Signed(body, JSON.copy())


@dataclass(frozen=True)
class PostmarkSigner:
    user: str
    password: str

    def sign(self, event: Event, to: str, now: int) -> Signed:
        at, message_id = event["occurred_at"], event["message_id"]
        record: dict[str, Any]
        if event["type"] == "delivered":
            record = {"RecordType": "Delivery", "Recipient": to, "DeliveredAt": at}
        elif event["type"] == "bounced":
            hard = event["bounce"] == "hard"
            record = {
                "RecordType": "Bounce",
                "ID": _number(event),
                "Type": "HardBounce" if hard else "SoftBounce",
                "TypeCode": 1 if hard else 4096,
                "Email": to,
                "BouncedAt": at,
            }
        else:
            record = {"RecordType": "SpamComplaint", "ID": _number(event), "Email": to}
            record["BouncedAt"] = at
        body = _body({**record, "MessageID": message_id})
        authorization = basic_authorization(self.user, self.password)
        return Signed(body, {"Authorization": authorization, **JSON})


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
        return Signed(_body(sns_signed(message, self.key, "2")), JSON.copy())
