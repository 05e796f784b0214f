"""What a dead letter says on ``{prefix}.send.dlq``: why and where, in the value and as headers.

One :class:`DeadLetter` is one ``email_dead_letters`` row and one DLQ record. The value is
``schemas/dead_letter.avsc`` (:func:`mailbus.schemas.codec.dead_letter_codec`); the headers repeat
the why and where so tools that never decode Avro (kcat, Kafka UIs, Connect) see them. They
are the union of what Spring Kafka's ``DeadLetterPublishingRecoverer`` (``kafka_dlt-original-
topic/partition/offset``, exception message) and Kafka Connect's error headers
(``__connect.errors.*``) carry, under one prefix:

=================================  ============================================
``mailbus.dlq.reason``             ``rejected``, ``max_attempts``, ...
``mailbus.dlq.status_code``        the provider's HTTP status
``mailbus.dlq.error``              short, secret-free error excerpt
``mailbus.dlq.attempts``           provider calls made
``mailbus.dlq.original.topic``     where the failed message was read
``mailbus.dlq.original.partition``
``mailbus.dlq.original.offset``
``mailbus.dlq.send_id``            ``email_sends.id``
``mailbus.dlq.id``                 ``email_dead_letters.id``
=================================  ============================================

Header values are UTF-8 text (numbers in decimal), readable as they are; a header whose
value is NULL is left out. The record is keyed by the dedupe key, else by the original
Kafka key, else by the dead letter's id, so one send's dead letters share a partition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

__all__ = ["HEADER_PREFIX", "DeadLetter"]

HEADER_PREFIX = "mailbus.dlq."

# Header name suffix → field, in the order they are written.
_HEADER_FIELDS = (
    ("reason", "reason"),
    ("status_code", "status_code"),
    ("error", "error"),
    ("attempts", "attempts"),
    ("original.topic", "original_topic"),
    ("original.partition", "original_partition"),
    ("original.offset", "original_offset"),
    ("send_id", "send_id"),
    ("id", "id"),
)


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter; field names are the table's columns and the Avro record's fields."""

    id: int
    reason: str
    created_at: datetime
    error: str = ""
    attempts: int = 0
    send_id: int | None = None
    dedupe_key: str | None = None
    priority: str | None = None
    template: str | None = None
    status_code: int | None = None
    original_topic: str | None = None
    original_partition: int | None = None
    original_offset: int | None = None
    original_key: bytes | None = None
    original_value: bytes | None = None

    def record(self) -> dict[str, Any]:
        """The Avro record (a plain dict for fastavro)."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> DeadLetter:
        return cls(**record)

    def kafka_key(self) -> bytes:
        if self.dedupe_key is not None:
            return self.dedupe_key.encode()
        if self.original_key is not None:
            return self.original_key
        return str(self.id).encode()

    def headers(self) -> tuple[tuple[str, bytes], ...]:
        found = ((suffix, getattr(self, field)) for suffix, field in _HEADER_FIELDS)
        return tuple(
            (HEADER_PREFIX + suffix, str(value).encode())
            for suffix, value in found
            if value is not None
        )
