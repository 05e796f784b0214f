"""Names and attributes of the consumer's spans, after OpenTelemetry's semantic conventions
for messaging (``messaging.*``, Kafka's ``messaging.kafka.*``) and HTTP clients
(``http.*``, ``server.*``); mailbus's own facts under ``mailbus.*``
(docs/guides/tracing.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from mailbus.consumer.core import Decision, SendView
from mailbus.consumer.ledger import MessageOrigin
from mailbus.consumer.provider import PreparedMail
from mailbus.kernel.tracing import Attributes

__all__ = ["CALL", "call_span", "process_span", "settle_span"]

CALL = "mailbus.provider_call"  # a call that is not HTTP (SMTP, SES through its SDK)


def process_span(origin: MessageOrigin) -> tuple[str, Attributes]:
    """One Kafka message, from its pointer to the recorded outcome."""
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": origin.topic,
        "messaging.destination.partition.id": str(origin.partition),
        "messaging.kafka.offset": origin.offset,
    }
    if origin.key is not None:
        attributes["messaging.kafka.message.key"] = origin.key.decode(errors="replace")
    return f"process {origin.topic}", attributes


def call_span(row: SendView, route: str | None, mail: Any) -> tuple[str, Attributes]:
    """The provider call: an HTTP client span (``POST``) for an HTTP provider."""
    attributes: dict[str, str | int] = {
        "mailbus.send_id": row.id,
        "mailbus.attempt": row.attempts,
        "mailbus.provider": route or "default",
    }
    if not isinstance(mail, PreparedMail):
        return CALL, attributes
    url = urlsplit(mail.call.url)
    attributes["http.request.method"] = mail.call.method
    attributes["server.address"] = url.hostname or ""
    attributes["server.port"] = url.port or (443 if url.scheme == "https" else 80)
    return mail.call.method, attributes


def settle_span(
    row: SendView, decision: Decision, origin: MessageOrigin | None
) -> tuple[str, Attributes]:
    """Recording the outcome, after which the message's offset may be committed."""
    attributes: dict[str, str | int] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "settle",
        "messaging.operation.name": "settle",
        "mailbus.send_id": row.id,
        "mailbus.status": decision.next_status.value,
    }
    if origin is None:
        return "settle", attributes
    attributes["messaging.destination.name"] = origin.topic
    return f"settle {origin.topic}", attributes
