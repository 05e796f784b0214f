"""The Kafka topics mailbus owns, created (idempotently) by `mailbus migrate`."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from mailbus.kernel.errors import MailbusError
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.settings import Settings
from mailbus_client.send_request import PRIORITIES

__all__ = ["create_topics", "ensure_topics", "send_topics"]

_RETENTION_MS = str(7 * 24 * 3600 * 1000)  # pointers only; the table keeps the mail


def send_topics(settings: Settings) -> list[str]:
    return [settings.topic(priority) for priority in PRIORITIES]


def ensure_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Create the send, DLQ and outcome-event topics (the intake's DLQ too) not there yet;
    return those created."""
    wanted = [
        *send_topics(settings),
        settings.dlq_topic,
        settings.events_topic,
        settings.intake_dlq_topic,
    ]
    return create_topics(settings, wanted, timeout)


def create_topics(settings: Settings, wanted: list[str], timeout: float = 30.0) -> list[str]:
    """Create those of ``wanted`` that do not exist yet; return the ones created."""
    admin = AdminClient(kafka_client_config(settings))
    config = {
        "retention.ms": _RETENTION_MS,
        "min.insync.replicas": str(min(2, settings.replication_factor)),
    }
    futures = admin.create_topics(
        [
            NewTopic(name, settings.partitions, settings.replication_factor, config=config)
            for name in wanted
        ],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise MailbusError(f"cannot create topic {name}: {exc.args[0].str()}") from None
    return created
