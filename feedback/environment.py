"""The environment variables each feedback command reads, for its ``--help``.

Kept apart from the commands so that building the CLI's parser imports neither aiohttp
nor psycopg.
"""

from __future__ import annotations

__all__ = ["SUPPRESS_ENVIRONMENT", "WEBHOOKS_ENVIRONMENT"]

_DATABASE = ("MAILBUS_DATABASE_URL", "PostgreSQL URL (postgresql://localhost/mailbus)")
_LOG_LEVEL = ("MAILBUS_LOG_LEVEL", "log level (INFO)")

WEBHOOKS_ENVIRONMENT = (
    ("MAILBUS_WEBHOOK_SECRET", "HMAC-SHA256 secret of Mailbus-Signature (required)"),
    ("MAILBUS_WEBHOOK_SECRET_FILE", "or: a file holding the secret"),
    ("MAILBUS_WEBHOOK_LISTEN", "host:port to listen on (127.0.0.1:8026)"),
    _DATABASE,
    ("MAILBUS_METRICS_PORT", "Prometheus /metrics port (off)"),
    _LOG_LEVEL,
)
SUPPRESS_ENVIRONMENT = (_DATABASE, _LOG_LEVEL)
