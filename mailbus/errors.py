"""The one exception root of mailbus.

    MailbusError
    ├── ConfigError          bad configuration (exit status 2, names the setting)
    ├── InvalidSendError     a send request that must not reach the table or the provider
    ├── QueueFullError       the queue cap refuses this priority for now; nothing was written
    ├── CodecError           a Kafka value that cannot be decoded
    └── StorageError         PostgreSQL could not be reached or refused a statement

Third-party errors (psycopg, confluent-kafka, httpx) are translated into these at the
adapter that calls the library; nothing above the adapters catches a library's own error.
"""

from __future__ import annotations

__all__ = [
    "CodecError",
    "ConfigError",
    "InvalidSendError",
    "MailbusError",
    "QueueFullError",
    "StorageError",
]


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


class QueueFullError(MailbusError):
    """Too many open rows for ``priority``: ``open_rows`` reached ``threshold`` of ``cap``."""

    def __init__(self, priority: str, open_rows: int, threshold: int, cap: int) -> None:
        super().__init__(
            f"queue full for {priority}: {open_rows} open rows (pending, sending, unknown),"
            f" {priority} is refused from {threshold} (MAILBUS_QUEUE_CAP={cap});"
            " nothing was written, retry later"
        )
        self.priority = priority
        self.open_rows = open_rows
        self.threshold = threshold
        self.cap = cap


class CodecError(MailbusError):
    """Bytes that are not a value of the expected Avro schema."""


class StorageError(MailbusError):
    """PostgreSQL failed; the work is retried or left for a later pass."""
