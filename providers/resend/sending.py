"""Resend's email API as a dialect of :class:`~mailbus.consumer.provider.HttpProvider`.

``POST {base}/emails`` with ``Authorization: Bearer <key>`` and ``Idempotency-Key: <provider
key>`` (the dedupe key, with the prefix and life of docs/providers.md#the-key-the-provider-sees:
two deployments on one team, or a key enqueued again after retention, never share one);
``200 {"id": ...}``. Resend keeps an idempotency key for 24 hours: the same key in
that window gives the same answer and no second mail (keys of 1-256 characters; ``409
invalid_idempotent_request`` when the body differs, ``409 concurrent_idempotent_requests``
while the first request is still in progress, safe to retry)
(https://resend.com/docs/dashboard/emails/idempotency-keys). Resend has no look-up by
anything mailbus chooses, so a call in doubt is resent under its key inside the window and
stays ``unknown`` past it (:mod:`mailbus.consumer.core.capability`).

Errors are ``{"statusCode", "name", "message"}``; 429 carries ``retry-after`` and
``ratelimit-reset`` (seconds) (https://resend.com/docs/api-reference/rate-limit).

Replies about our account are the provider's state, never the mail's
(https://resend.com/docs/api-reference/errors): ``missing_api_key`` and
``restricted_api_key`` (401), ``invalid_api_key`` (403) and any other 401/403 are the
account's (``ACCOUNT``); a 403 ``validation_error`` saying the domain is not verified, or
that only testing emails to our own address may be sent until a domain is verified, is the
sender identity's (``SENDER``; https://resend.com/docs/knowledge-base/403-error-domain-mismatch);
``daily_quota_exceeded`` and ``monthly_quota_exceeded`` (429: "wait until 24 hours have
passed", or the next month) are a sending quota (``QUOTA``), while ``rate_limit_exceeded``
stays an ordinary 429. The
subject, text and html come from a local template or the row's variables
(:func:`~mailbus.providers.smtp.sending.mail_parts`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mailbus.consumer.core.capability import Capability, IdempotencyKey
from mailbus.consumer.core.outcome import (
    ACCOUNT,
    QUOTA,
    SENDER,
    ProviderReply,
    parse_retry_after,
)
from mailbus.consumer.provider import (
    LookupResult,
    OutgoingMail,
    WireRequest,
    json_body,
    message_id_of,
)
from mailbus.kernel.errors import InvalidSendError
from mailbus.providers.smtp.sending import mail_parts
from mailbus_client.send_request import mail_headers

__all__ = ["RESEND_WINDOW_S", "ResendDialect"]

RESEND_WINDOW_S = 24 * 3600.0
_MAX_KEY_CHARS = 256
_TRANSIENT = frozenset({"concurrent_idempotent_requests"})  # a 409 to retry, not a verdict
_QUOTAS = frozenset({"daily_quota_exceeded", "monthly_quota_exceeded"})
_UNVERIFIED = re.compile(r"(?i)domain is not verified|verify a domain")


class ResendDialect:
    """Resend, sending as ``sender``; ``window_s`` overrides the documented 24 h (tests)."""

    def __init__(self, sender: str, window_s: float = RESEND_WINDOW_S) -> None:
        self.sender = sender
        self.capability = Capability(
            IdempotencyKey("Idempotency-Key", window_s),
            source="https://resend.com/docs/dashboard/emails/idempotency-keys",
        )

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def encode(self, mail: OutgoingMail) -> WireRequest:
        key = mail.key
        if not (key.isascii() and key.isprintable() and 0 < len(key) <= _MAX_KEY_CHARS):
            raise InvalidSendError(
                "dedupe_key",
                "must be 1-256 printable ASCII characters with its prefix and life"
                " (Resend's Idempotency-Key)",
            )
        subject, text, html = mail_parts(mail)
        document: dict[str, Any] = {
            "from": self.sender,
            "to": [mail.to_address],
            "subject": subject,
            "text": text,
        }
        if html is not None:
            document["html"] = html
        headers = mail.variables.get("headers")
        if headers is not None:
            document["headers"] = mail_headers(headers)
        return WireRequest(
            "POST",
            "emails",
            {"Idempotency-Key": key, "Content-Type": "application/json"},
            body=json_body(document),
        )

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply:
        retry_after = parse_retry_after(
            headers.get("retry-after") or headers.get("ratelimit-reset"), now
        )
        if 200 <= status <= 299:
            return ProviderReply(status, message_id_of(body), retry_after)
        name, message = _error(body)
        excerpt = f"{name}: {message}" if name else message
        return ProviderReply(
            status,
            None,
            retry_after,
            excerpt,
            transient=status == 409 and name in _TRANSIENT,
            server_stage=_account_state(status, name, message),
        )

    def lookup_request(self, dedupe_key: str) -> WireRequest:
        raise NotImplementedError("Resend has no look-up by idempotency key")

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        raise NotImplementedError("Resend has no look-up by idempotency key")


def _account_state(status: int, name: str, message: str) -> str | None:
    """``ACCOUNT``, ``SENDER`` or ``QUOTA`` for a reply about our account (see the module)."""
    if name in _QUOTAS:
        return QUOTA
    if status not in (401, 403):
        return None
    if status == 403 and _UNVERIFIED.search(message):
        return SENDER
    return ACCOUNT


def _error(body: bytes) -> tuple[str, str]:
    """``(name, message)`` of a Resend error body; ``("", raw text)`` if it is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return "", body[:2000].decode("utf-8", "replace")
    if not isinstance(doc, dict):
        return "", body[:2000].decode("utf-8", "replace")
    return str(doc.get("name") or ""), str(doc.get("message") or "")
