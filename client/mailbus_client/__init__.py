"""What a domain service needs to enqueue mail, and nothing else (psycopg is the only
dependency; no Kafka, HTTP server or metrics stack).

    from mailbus_client import Client, SendRequest

Modules: ``client`` (:class:`Client`, :class:`AsyncClient`), ``enqueue`` (the one-call
helper, configured from the environment per call), ``steps`` (the statements, without
I/O), ``send_request`` (what a valid request is), ``policies`` (default expiry per
template, the queue cap), ``trace_context`` (the current OpenTelemetry span's context),
``errors`` (the exception root), ``sqlfiles`` (named queries from ``.sql`` files).
"""

from mailbus_client.client import AsyncClient, Client
from mailbus_client.enqueue import enqueue
from mailbus_client.errors import ConfigError, InvalidSendError, MailbusError, QueueFullError
from mailbus_client.policies import PolicyBook, QueueCap
from mailbus_client.send_request import SendRequest
from mailbus_client.steps import EnqueueResult, SendStatus

__all__ = [
    "AsyncClient",
    "Client",
    "ConfigError",
    "EnqueueResult",
    "InvalidSendError",
    "MailbusError",
    "PolicyBook",
    "QueueCap",
    "QueueFullError",
    "SendRequest",
    "SendStatus",
    "enqueue",
]
