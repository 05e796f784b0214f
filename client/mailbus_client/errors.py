"""The root of every mailbus error, and the errors an enqueuing service can meet.

    MailbusError
    ├── ConfigError          bad configuration (names the setting)
    ├── InvalidSendError     a send request that must not reach the table or the provider
    └── QueueFullError       the queue cap refuses this priority for now; nothing was written

The services' own errors (``mailbus.kernel.errors``) derive from the same root, so one
``except MailbusError`` catches everything mailbus raises on purpose.
"""

from __future__ import annotations

__all__ = ["ConfigError", "InvalidSendError", "MailbusError", "QueueFullError"]


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
