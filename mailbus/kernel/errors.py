"""The one exception root of mailbus, as the services see it.

    MailbusError             (mailbus_client.errors: the slim client raises these too)
    ├── ConfigError          bad configuration (exit status 2, names the setting)
    ├── InvalidSendError     a send request that must not reach the table or the provider
    ├── QueueFullError       the queue cap refuses this priority for now; nothing was written
    ├── CodecError           a Kafka value that cannot be decoded
    ├── SchemaUnavailable    a value that cannot be decoded *yet* (the registry away)
    ├── StorageError         PostgreSQL could not be reached or refused a statement
    ├── RefusedError         what the database holds refuses the request (exit status 3)
    └── UnstorableError      PostgreSQL refused the data itself: retrying cannot help

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
    "RefusedError",
    "SchemaUnavailable",
    "StorageError",
    "UnstorableError",
]


class CodecError(MailbusError):
    """Bytes that are not a value of the expected Avro schema."""


class StorageError(MailbusError):
    """PostgreSQL failed; the work is retried or left for a later pass."""


class RefusedError(MailbusError):
    """The request is well formed and everything answered, but the state it meets refuses
    it (no such send, a status or campaign state that does not allow the change); nothing
    was changed. The command line exits 3 (``mailbus.app.exit_codes``)."""


class SchemaUnavailable(MailbusError):
    """What decodes a value cannot be reached yet: the schema registry timed out, answered
    5xx, or does not know the writer schema's id (yet). Temporary: wait, keep the offset."""


class UnstorableError(MailbusError):
    """PostgreSQL refused the data of a statement (a data exception, a constraint, a size
    limit): the same statement fails on every try, so the caller sets its input aside."""
