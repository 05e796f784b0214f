"""SendGrid's v3 Mail Send API as a dialect of :class:`~mailbus.consumer.provider.HttpProvider`.

``POST {base}/v3/mail/send`` with ``Authorization: Bearer <key>`` and a JSON body of
``personalizations``, ``from``, ``subject`` and ``content``; ``202 Accepted`` with an empty
body and the message id in the ``X-Message-Id`` header
(https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send). That id is what
the Event Webhook's ``sg_message_id`` starts with, which ``providers/sendgrid/events``
matches (docs/providers.md#delivery-events).

**What it offers against doubt: neither.** Mail Send takes no idempotency key (the request
body has none, and no header is documented), so a second request is a second mail. A
look-up by something mailbus chose exists only on paper for this purpose: the Email
Activity API can filter by ``unique_args`` (``custom_args``), but it is a paid add-on and
its index is filled after the send, so "not found" may mean "not yet indexed"
(https://www.twilio.com/docs/sendgrid/for-developers/sending-email/getting-started-email-activity-api);
resending on such an answer would duplicate mail. A call in doubt therefore stays
``unknown`` for an operator (at most once), or is resent with
``MAILBUS_UNKNOWN_OUTCOME=at_least_once``. The row's provider key (its dedupe key, with
the prefix and life of docs/providers.md#the-key-the-provider-sees) still travels as
``custom_args.dedupe_key``, so the operator finds the mail in Email Activity and every
Event Webhook post carries it.

Errors are ``{"errors": [{"message", "field", "help"}]}``; a 429 carries
``X-RateLimit-Reset``, the Unix time at which the limit resets
(https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/rate-limits),
which becomes the Retry-After minimum. 400 (a bad request) and 413 (too large) are
``rejected``; 429 and 5xx are retried (:mod:`mailbus.consumer.core.outcome`). A 401 ("The
provided authorization grant is invalid, expired, or revoked", or a key without the Mail
Send permission) or a 403 is about our account, the provider's state, never the mail's
(``ACCOUNT``; https://support.sendgrid.com/hc/en-us/articles/18322114821403-4XX-API-Errors-and-Troubleshooting-Suggestions,
https://www.twilio.com/docs/api/errors/60604); a 403 "The from address does not match a
verified Sender Identity" is the sender identity's (``SENDER``;
https://www.twilio.com/docs/api/errors/60222); "Maximum credits exceeded" (a 401 on a
plan whose sending credits ran out) is a sending quota (``QUOTA``). A
400 naming the recipient's address (``field`` ``personalizations.0.to.0.email``: "Does not
contain a valid address.") is SendGrid's definite "invalid recipient": ``bad_recipient``,
and the address is suppressed (docs/providers.md#a-bad-address-is-suppressed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.outcome import (
    ACCOUNT,
    QUOTA,
    SENDER,
    ProviderReply,
    parse_retry_after,
)
from mailbus.consumer.provider import LookupResult, OutgoingMail, WireRequest, json_body, valid_id
from mailbus.consumer.templates import ProviderTemplate
from mailbus.providers.smtp.sending import mail_parts, template_data
from mailbus_client.send_request import mail_headers

__all__ = ["DEDUPE_ARG", "SendGridDialect"]

DEDUPE_ARG = "dedupe_key"  # custom_args name carrying the row's dedupe key
_EXCERPT_CHARS = 2000
_RECIPIENT_FIELD = re.compile(r"personalizations\.\d+\.to\.\d+\.email")
_SENDER_IDENTITY = re.compile(r"(?i)sender identity")
_CREDITS = re.compile(r"(?i)maximum credits exceeded")


class SendGridDialect:
    """SendGrid v3, sending as ``sender``."""

    capability = Capability(
        source="https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send"
    )

    def __init__(self, sender: str) -> None:
        self.sender = sender

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def encode(self, mail: OutgoingMail) -> WireRequest:
        """The mail spelled out (``subject``, ``content``), or by SendGrid's own dynamic
        template: ``template_id`` with the variables as the personalization's
        ``dynamic_template_data`` (the template gives subject and content)."""
        personalization: dict[str, Any] = {"to": [{"email": mail.to_address}]}
        document: dict[str, Any] = {
            "personalizations": [personalization],
            "from": {"email": self.sender},
        }
        if isinstance(mail.content, ProviderTemplate):
            document["template_id"] = mail.content.template_id
            personalization["dynamic_template_data"] = template_data(mail)
        else:
            subject, text, html = mail_parts(mail)
            content = [{"type": "text/plain", "value": text}]
            if html is not None:
                content.append({"type": "text/html", "value": html})
            document["subject"] = subject
            document["content"] = content
        document["custom_args"] = {DEDUPE_ARG: mail.key}
        headers = mail.variables.get("headers")
        if headers is not None:
            document["headers"] = mail_headers(headers)
        return WireRequest(
            "POST", "v3/mail/send", {"Content-Type": "application/json"}, body=json_body(document)
        )

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply:
        retry_after = parse_retry_after(headers.get("Retry-After"), now)
        if retry_after is None and status == 429:
            retry_after = _reset_in(headers.get("X-RateLimit-Reset"), now)
        if 200 <= status <= 299:
            return ProviderReply(status, valid_id(headers.get("X-Message-Id")), retry_after)
        bad_recipient = status == 400 and any(
            _RECIPIENT_FIELD.fullmatch(str(e.get("field"))) for e in errors_of(body)
        )
        excerpt = _excerpt(body)
        return ProviderReply(
            status,
            None,
            retry_after,
            excerpt,
            bad_recipient=bad_recipient,
            server_stage=_account_state(status, excerpt),
        )

    def lookup_request(self, dedupe_key: str) -> WireRequest:
        raise NotImplementedError("SendGrid has no look-up mailbus can trust (see the module)")

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        raise NotImplementedError("SendGrid has no look-up mailbus can trust (see the module)")


def _account_state(status: int, excerpt: str) -> str | None:
    """``ACCOUNT``, ``SENDER`` or ``QUOTA`` for a reply about our account (see the module)."""
    if status not in (401, 403):
        return None
    if _CREDITS.search(excerpt):
        return QUOTA
    return SENDER if _SENDER_IDENTITY.search(excerpt) else ACCOUNT


def _reset_in(value: str | None, now: datetime) -> float | None:
    """Seconds until ``X-RateLimit-Reset`` (Unix seconds); None if absent or malformed."""
    try:
        reset = float((value or "").strip())
    except ValueError:
        return None
    return parse_retry_after(f"{max(reset - now.timestamp(), 0.0):.3f}", now)


def errors_of(body: bytes) -> list[dict[str, Any]]:
    """The ``errors`` of a SendGrid error body; [] if it is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


def _excerpt(body: bytes) -> str:
    errors = errors_of(body)
    if not errors:
        return body[:_EXCERPT_CHARS].decode("utf-8", "replace")
    return "; ".join(
        f"{e.get('field')}: {e.get('message')}" if e.get("field") else str(e.get("message"))
        for e in errors
    )
