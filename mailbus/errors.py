"""The one exception root of mailbus.

    MailbusError
    ├── ConfigError          bad configuration (exit status 2, names the setting)
    ├── InvalidSendError     a send request that must not reach the table or the provider
    ├── CodecError           a Kafka value that cannot be decoded
    └── StorageError         PostgreSQL could not be reached or refused a statement

Third-party errors (psycopg, confluent-kafka, httpx) are translated into these at the
adapter that calls the library; nothing above the adapters catches a library's own error.
"""

from __future__ import annotations

__all__ = ["CodecError", "ConfigError", "InvalidSendError", "MailbusError", "StorageError"]


class MailbusError(Exception):
    """Root of every error mailbus raises on purpose."""


class ConfigError(MailbusError):
    """A setting is missing or malformed; ``setting`` names it."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class InvalidSendError(MailbusError):
    """A send request is malformed; ``field`` names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class CodecError(MailbusError):
    """Bytes that are not a value of the expected Avro schema."""


class StorageError(MailbusError):
    """PostgreSQL failed; the work is retried or left for a later pass."""
