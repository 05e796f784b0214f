"""The relay's second outbox: ``email_dead_letters`` rows onto ``{prefix}.send.dlq``.

The consumer writes a dead letter in the same transaction as the send's ``failed``
status; the relay publishes it with the same claim-publish-commit transaction as send
pointers (:mod:`mailbus.relay.batch`), so no dead letter is lost between PostgreSQL and
Kafka. The insert trigger's NOTIFY wakes the relay as it does for new sends, and says it is
a dead letter's (:mod:`mailbus.relay.dead_letter_claims`).
"""

from __future__ import annotations

from psycopg.rows import class_row

from mailbus.kernel.settings import Settings
from mailbus.relay.batch import Outbox
from mailbus.relay.publisher import OutgoingMessage
from mailbus.schemas.codec import dead_letter_codec
from mailbus.schemas.dead_letter import DeadLetter
from mailbus.schemas.registry import ValueCodec, dead_letter_value_codec

__all__ = ["dead_letter_message", "dead_letter_outbox"]


def dead_letter_message(
    letter: DeadLetter, topic: str, codec: ValueCodec | None = None
) -> OutgoingMessage:
    """The DLQ record of ``letter``: Avro value, why-and-where headers, stable key."""
    return OutgoingMessage(
        topic=topic,
        key=letter.kafka_key(),
        value=(codec or dead_letter_codec()).encode(letter.record()),
        headers=letter.headers(),
    )


def dead_letter_outbox(settings: Settings, queries: dict[str, str]) -> Outbox[DeadLetter]:
    topic = settings.dlq_topic
    codec = dead_letter_value_codec(settings)
    return Outbox(
        name="dead letters",
        claim=queries["claim_dead_letters"],
        unclaim=queries["unclaim_dead_letters"],
        row_factory=class_row(DeadLetter),  # the claim returns exactly its fields
        row_id=lambda letter: letter.id,
        to_message=lambda letter: dead_letter_message(letter, topic, codec),
    )
