"""The one exception root of mailbus, as the services see it.

    MailbusError             (mailbus_client.errors: the slim client raises these too)
    ├── ConfigError          bad configuration (exit status 2, names the setting)
    ├── InvalidSendError     a send request that must not reach the table or the provider
    ├── QueueFullError       the queue cap refuses this priority for now; nothing was written
    ├── CodecError           a Kafka value that cannot be decoded
    └── StorageError         PostgreSQL could not be reached or refused a statement

Third-party errors (psycopg, confluent-kafka, httpx) are translated into these at the
adapter that calls the library; nothing above the adapters catches a library's own error.
"""

from __future__ import annotations

from mailbus_client.errors import ConfigError, InvalidSendError, MailbusError, QueueFullError

__all__ = [
    "CodecError",
    "ConfigError",
    "InvalidSendError",
    "MailbusError",
    "QueueFullError",
    "StorageError",
]


class CodecError(MailbusError):
    """Bytes that are not a value of the expected Avro schema."""


class StorageError(MailbusError):
    """PostgreSQL failed; the work is retried or left for a later pass."""
