"""The enqueue helper for domain services: one call inside the caller's transaction.

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", (1042,))
        enqueue(conn, SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"))

The helper never commits: the row becomes visible to the relay exactly when the caller's
business change does, and a rollback leaves neither. Plain SQL inserts keep working, but
they get neither a policy's default expiry nor the queue bound: both live in this helper.
:class:`mailbus_client.Client` does the same with its configuration given once (and adds
``enqueue_many``, ``status``, ``cancel`` and an asynchronous twin).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from mailbus_client.client import run
from mailbus_client.db_schema import DEFAULT_SCHEMA
from mailbus_client.policies import PolicyBook, QueueCap, configured_policy_book
from mailbus_client.send_request import SendRequest
from mailbus_client.steps import EnqueueResult, enqueue_steps
from mailbus_client.trace_context import current_trace_context

__all__ = ["EnqueueResult", "PolicyBook", "QueueCap", "SendRequest", "enqueue"]


def enqueue(
    conn: psycopg.Connection[Any],
    request: SendRequest,
    *,
    policies: PolicyBook | None = None,
    cap: QueueCap | None = None,
    now: datetime | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> EnqueueResult:
    """Validate ``request`` and insert it unless its dedupe key exists.

    ``policies``: when ``request.expires_at`` is None and the template's policy has
    ``expire_after_s``, the row gets ``expires_at = send time + expire_after_s``, where the
    send time is ``request.send_at``, else the given ``now``, else PostgreSQL's ``now()``
    of the caller's transaction (the instant ``created_at`` gets). Default: the book
    MAILBUS_POLICY_FILE names, else the shipped ``mailbus_client/mail_policies.json``
    (each file read once per process).

    ``cap``: the bound on open rows (``pending``, ``sending``, ``unknown``); default
    ``QueueCap.from_environ()`` (MAILBUS_QUEUE_CAP, unbounded when unset); pass
    ``QueueCap()`` to opt out. Past the threshold of ``request.priority`` (p2 first) it
    raises :class:`QueueFullError` and writes nothing; the caller's transaction stays
    usable, so it may drop the mail and commit, or roll back. A key already in the table
    returns ``created=False`` even when full. The count and the insert are one statement
    but not serialised: concurrent callers may overshoot a threshold by at most their
    number. Plain SQL inserts are never bounded.

    The row records ``request.traceparent``, else the current OpenTelemetry span's context.
    Both defaults are read from the environment on every call; a
    :class:`~mailbus_client.Client` reads them once.

    ``schema``: where mailbus's tables are (MAILBUS_DB_SCHEMA of its processes), named in
    the statement: the connection's search_path does not matter.

    Raises :class:`InvalidSendError` before touching the database.
    """
    book = configured_policy_book() if policies is None else policies
    bound = QueueCap.from_environ() if cap is None else cap
    return run(conn, enqueue_steps(request, book, bound, current_trace_context(), now, schema))
