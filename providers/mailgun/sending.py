"""Mailgun's Messages API as a dialect of :class:`~mailbus.consumer.provider.HttpProvider`.

``POST {base}/v3/{domain}/messages`` with HTTP basic auth ``api:<key>`` and a
``multipart/form-data`` body (``from``, ``to``, ``subject``, ``text``, ``html``, ``h:<header>``
for a mail header, ``v:<name>`` for a custom variable); ``200 {"id": "<...>", "message":
"Queued. Thank you."}`` (https://documentation.mailgun.com/docs/mailgun/api-reference/send/mailgun/messages).
The id is stored without its angle brackets, the form ``providers/mailgun/events``
matches (docs/providers.md#delivery-events). The base URL is the region's:
``https://api.mailgun.net`` (US) or ``https://api.eu.mailgun.net`` (EU)
(https://documentation.mailgun.com/docs/mailgun/api-reference/api-overview).

**What it offers against doubt: neither.** The Messages API takes no idempotency key. The
Events API cannot serve as a look-up of what mailbus chose: its documented filters are the
event, list, attachment, from, ``message-id`` (Mailgun's, which a lost reply never gave
us), subject, to, size, recipient, tags (limited per domain) and severity -- not the
``v:`` variables -- and events reach its index late and out of order, so a page younger
than "e.g. half an hour" is not to be trusted
(https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-polling). A call in
doubt stays ``unknown`` for an operator (at most once), or is resent with
``MAILBUS_UNKNOWN_OUTCOME=at_least_once``. The row's provider key (its dedupe key, with
the prefix and life of docs/providers.md#the-key-the-provider-sees) travels as
``v:dedupe_key``, so every event of the mail, and the webhook's ``user-variables``, carry it.

Errors are ``{"message": ...}``; a 429 says when to try again in its message ("... limit
exceeded, try again after Mon, 20 Dec 2021 20:33:21 UTC"), which (or a ``Retry-After``
header) becomes the Retry-After minimum. 400 and 413 are ``rejected``; 429 and 5xx are
retried (:mod:`mailbus.consumer.core.outcome`). About our account, the provider's state,
never the mail's (https://documentation.mailgun.com/docs/mailgun/quickstart-guide/responses):
a 401 (a wrong key: "Forbidden") and a 403 ("Auth error or access denied", e.g. a sandbox
domain sending to an address that is not an authorized recipient, a disabled domain) are
the account's (``ACCOUNT``); a 404 on the send path is the sending domain's -- "Domain not
found: <domain>", and Mailgun warns a 404 "can be temporal" -- so the sender identity's
(``SENDER``). Mailgun documents no sending-quota reply of its own. The 400 "to
parameter is not a valid address" is Mailgun's definite "invalid recipient":
``bad_recipient``, and the address is suppressed
(docs/providers.md#a-bad-address-is-suppressed).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from datetime import datetime

from mailbus.consumer.core.capability import Capability
from mailbus.consumer.core.outcome import ACCOUNT, SENDER, ProviderReply, parse_retry_after
from mailbus.consumer.provider import LookupResult, OutgoingMail, WireRequest, valid_id
from mailbus.kernel.errors import ConfigError
from mailbus.providers.smtp.sending import mail_parts
from mailbus_client.send_request import mail_headers

__all__ = ["DEDUPE_VARIABLE", "MAILGUN_REGIONS", "MailgunDialect", "message_of"]

DEDUPE_VARIABLE = "dedupe_key"  # sent as v:dedupe_key
MAILGUN_REGIONS = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}
_DOMAIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_TRY_AGAIN = re.compile(r"try again after (.+?)\s*$")
_EXCERPT_CHARS = 2000
_BAD_TO = "to parameter is not a valid address"
_ACCOUNT_STATES = {401: ACCOUNT, 403: ACCOUNT, 404: SENDER}  # see the module


class MailgunDialect:
    """Mailgun, sending from ``domain`` as ``sender``."""

    capability = Capability(
        source="https://documentation.mailgun.com/docs/mailgun/user-manual/events/event-polling"
    )

    def __init__(self, sender: str, domain: str) -> None:
        if not _DOMAIN.fullmatch(domain):
            raise ConfigError(
                "MAILBUS_MAILGUN_DOMAIN", "must be the sending domain, e.g. mg.example.com"
            )
        self.sender = sender
        self.domain = domain

    def auth_headers(self, api_key: str) -> dict[str, str]:
        token = base64.b64encode(f"api:{api_key}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def encode(self, mail: OutgoingMail) -> WireRequest:
        subject, text, html = mail_parts(mail)
        fields = [
            ("from", self.sender),
            ("to", mail.to_address),
            ("subject", subject),
            ("text", text),
        ]
        if html is not None:
            fields.append(("html", html))
        headers = mail.variables.get("headers")
        if headers is not None:
            fields.extend((f"h:{name}", value) for name, value in mail_headers(headers).items())
        fields.append((f"v:{DEDUPE_VARIABLE}", mail.key))
        boundary = uuid.uuid4().hex
        return WireRequest(
            "POST",
            f"v3/{self.domain}/messages",
            {"Content-Type": f"multipart/form-data; boundary={boundary}"},
            body=form_data(fields, boundary),
        )

    def reply(
        self, status: int, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ProviderReply:
        message = message_of(body)
        retry_after = parse_retry_after(headers.get("Retry-After"), now)
        if retry_after is None and status == 429:
            found = _TRY_AGAIN.search(message)
            retry_after = parse_retry_after(found.group(1), now) if found else None
        if 200 <= status <= 299:
            return ProviderReply(status, _message_id(body), retry_after)
        bad_recipient = status == 400 and message.startswith(_BAD_TO)
        return ProviderReply(
            status,
            None,
            retry_after,
            message,
            bad_recipient=bad_recipient,
            server_stage=_ACCOUNT_STATES.get(status),
        )

    def lookup_request(self, dedupe_key: str) -> WireRequest:
        raise NotImplementedError("Mailgun has no look-up mailbus can trust (see the module)")

    def lookup_reply(self, dedupe_key: str, status: int, body: bytes) -> LookupResult:
        raise NotImplementedError("Mailgun has no look-up mailbus can trust (see the module)")


def form_data(fields: list[tuple[str, str]], boundary: str) -> bytes:
    """``fields`` as a ``multipart/form-data`` body (RFC 7578) under ``boundary``."""
    parts = []
    for name, value in fields:
        quoted = name.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{quoted}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
        )
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def message_of(body: bytes) -> str:
    """The ``message`` of a Mailgun reply, else the body's text (clipped)."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return body[:_EXCERPT_CHARS].decode("utf-8", "replace")


def _message_id(body: bytes) -> str | None:
    """The reply's ``id`` without its angle brackets, if it is a usable id."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    raw = doc.get("id") if isinstance(doc, dict) else None
    if not isinstance(raw, str):
        return None
    return valid_id(raw.strip().removeprefix("<").removesuffix(">"))
