"""Postmark's email API as a dialect of :class:`~mailbus.consumer.provider.HttpProvider`.

``POST {base}/email`` with ``X-Postmark-Server-Token: <server token>``; ``200 {"To",
"SubmittedAt", "MessageID", "ErrorCode": 0, "Message": "OK"}``
(https://postmarkapp.com/developer/api/email-api). ``MessageID`` is what Postmark's
webhooks carry back (:mod:`mailbus.providers.postmark.events`), so it is the id stored.

Postmark has no idempotency key, but it keeps what mailbus sends with a mail as custom
``Metadata`` and finds it again: ``GET {base}/messages/outbound?count=..&offset=0&
metadata_<name>=<value>`` answers ``{"TotalCount", "Messages": [{"MessageID", "Metadata",
...}]}`` (https://postmarkapp.com/developer/api/messages-api,
https://postmarkapp.com/support/article/1125-custom-metadata-faq). So every mail carries its
provider key (docs/providers.md#the-key-the-provider-sees) as the metadata field
``mailbus_key`` (a key longer than the 80 characters a
metadata value may hold travels as ``sha256:<hex>``), and a call in doubt is looked up by
it: a *look-up* capability (:mod:`mailbus.consumer.core.capability`), exactly once.

Replies (https://postmarkapp.com/developer/api/overview#response-codes and #error-codes):
errors are ``{"ErrorCode", "Message"}``. ``422`` carries the ErrorCode that says why:
``406`` inactive recipient (a hard bounce, complaint or manual suppression at Postmark)
and ``300`` invalid request are about the mail (``failed``). About our account, the
provider's state (retried, the breaker counts them, no attempt spent), never a
recipient's ``failed``: ``10`` bad or missing API token, ``405`` not allowed to send,
``412`` account pending, ``413`` account may not send, and any ``401`` or ``403`` (a 403
with an HTML body comes from the network layer in front of the API:
https://postmarkapp.com/support/article/getting-a-403-that-doesnt-look-like-a-postmark-error)
(``ACCOUNT``); ``400`` sender signature not found, ``401`` sender signature not confirmed,
and a ``300`` whose Message is about the From address ("Invalid 'From' address: ... is not
a verified sender signature",
https://postmarkapp.com/support/article/troubleshooting-422-unprocessable-entity-errors)
(``SENDER``) -- a 300 about the To address stays the mail's. ``422`` ErrorCode ``429``
"Rate limit exceeded" is a rate limit like a 429 (the process pauses, the breaker is not
fed). ``429``, ``500`` and ``503`` are retried. Postmark documents no rate-limit header and
no sending quota; a ``Retry-After`` is honoured if one comes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.outcome import ACCOUNT, SENDER, ProviderReply, parse_retry_after
from mailbus.consumer.provider import LookupResult, OutgoingMail, WireRequest, json_body, valid_id
from mailbus.consumer.templates import ProviderTemplate
from mailbus.providers.smtp.sending import mail_parts, template_data
from mailbus_client.send_request import mail_headers

__all__ = ["METADATA_FIELD", "PostmarkDialect", "metadata_value"]

METADATA_FIELD = "mailbus_key"
_MAX_METADATA_CHARS = 80  # a metadata value's limit (the custom metadata FAQ)
_ACCOUNT_CODES = frozenset({10, 405, 412, 413})  # token, not allowed, pending, may not send
_SENDER_CODES = frozenset({400, 401})  # sender signature not found, not confirmed
_FROM = re.compile(r"(?i)'from'|\bfrom address\b|sender signature")
# the most a search returns (https://postmarkapp.com/developer/api/messages-api): a loose
# filter may match other keys' mails too, and ours must be among those returned
_SEARCH_COUNT = "500"


def metadata_value(dedupe_key: str) -> str:
    """What a mail carries (and is looked up by) as ``Metadata.mailbus_key``: the key, or
    ``sha256:<hex>`` of it when it is longer than a metadata value may be."""
    if len(dedupe_key) <= _MAX_METADATA_CHARS:
        return dedupe_key
    return "sha256:" + hashlib.sha256(dedupe_key.encode()).hexdigest()


class PostmarkDialect:
    """Postmark, sending as ``sender`` on the ``message_stream`` (``outbound``: the default
    transactional stream)."""

    capability = Capability(
        look_up=True, source="https://postmarkapp.com/developer/api/messages-api"
    )

    def __init__(self, sender: str, message_stream: str = "outbound") -> None:
        self.sender = sender
        self.message_stream = message_stream

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"X-Postmark-Server-Token": api_key}

    def encode(self, mail: OutgoingMail) -> WireRequest:
        """``POST /email``, or ``POST /email/withTemplate`` with ``TemplateAlias`` and
        ``TemplateModel`` for a mail sent by Postmark's own template
        (https://postmarkapp.com/developer/api/templates-api#email-with-template)."""
        document: dict[str, Any] = {"From": self.sender, "To": mail.to_address}
        path = "email"
        if isinstance(mail.content, ProviderTemplate):
            path = "email/withTemplate"
            document["TemplateAlias"] = mail.content.template_id
            document["TemplateModel"] = template_data(mail)
        else:
            subject, text, html = mail_parts(mail)
            document["Subject"] = subject
            document["TextBody"] = text
            if html is not None:
                document["HtmlBody"] = html
        document["MessageStream"] = self.message_stream
        document["Metadata"] = {METADATA_FIELD: metadata_value(mail.key)}
        headers = mail.variables.get("headers")
        if headers is not None:
            document["Headers"] = [
                {"Name": name, "Value": value} for name, value in mail_headers(headers).items()
            ]
        return WireRequest(
            "POST", path, {"Content-Type": "application/json"}, body=json_body(document)
        )

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply:
        retry_after = parse_retry_after(headers.get("Retry-After"), now)
        doc = _document(body)
        code = doc.get("ErrorCode") if doc is not None else None
        if 200 <= status <= 299:
            message_id = valid_id(doc.get("MessageID")) if doc is not None and code == 0 else None
            return ProviderReply(status, message_id, retry_after)
        message = str(doc.get("Message") or "") if doc is not None else ""
        if not message:
            message = body[:2000].decode("utf-8", "replace")
        excerpt = f"ErrorCode {code}: {message}" if isinstance(code, int) else message
        return ProviderReply(
            status,
            None,
            retry_after,
            excerpt,
            rate_limited=status == 422 and code == 429,
            server_stage=_account_state(status, code, message),
        )

    def lookup_request(self, dedupe_key: str) -> WireRequest:
        params = {
            "count": _SEARCH_COUNT,
            "offset": "0",
            f"metadata_{METADATA_FIELD}": metadata_value(dedupe_key),
        }
        return WireRequest("GET", "messages/outbound", {}, params=params)

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        """The search filtered by the key's metadata, the newest first. Postmark does not
        document how ``metadata_<name>`` matches (exactly? ignoring case? a prefix?), so a
        message counts only if its ``Metadata.mailbus_key`` is exactly the value sent with
        this key: ``order-1`` never finds ``Order-1`` or ``order-10``."""
        wanted = metadata_value(dedupe_key)
        if status != 200:
            excerpt = body[:2000].decode("utf-8", "replace")
            return LookupResult(
                None, True, f"http {status}: {excerpt}" if excerpt else f"http {status}"
            )
        doc = _document(body)
        messages = doc.get("Messages") if doc is not None else None
        if not isinstance(messages, list):
            return LookupResult(None, True, "http 200 without a Messages list")
        for message in messages:
            if not isinstance(message, dict):
                continue
            metadata = message.get("Metadata")
            if not isinstance(metadata, dict) or metadata.get(METADATA_FIELD) != wanted:
                continue  # another mail the search matched
            message_id = valid_id(message.get("MessageID"))
            if message_id is not None:
                return LookupResult(message_id, False)
        total = doc.get("TotalCount") if doc is not None else None
        if isinstance(total, int) and total > len(messages):
            return LookupResult(None, True, f"{total} matches, ours not among the first")
        return LookupResult(None, False)  # nothing sent under this key


def _account_state(status: int, code: Any, message: str) -> str | None:
    """``ACCOUNT`` or ``SENDER`` for a reply about our account (see the module), else None."""
    if status in (401, 403):
        return ACCOUNT
    if status != 422 or not isinstance(code, int):
        return None
    if code in _ACCOUNT_CODES:
        return ACCOUNT
    if code in _SENDER_CODES or (code == 300 and _FROM.search(message)):
        return SENDER
    return None


def _document(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
