"""The enqueue helper for domain services: one call inside the caller's transaction.

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", (1042,))
        enqueue(conn, SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"))

The helper never commits: the row becomes visible to the relay exactly when the caller's
business change does, and a rollback leaves neither. Plain SQL inserts keep working.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from mailbus.sqlfiles import load_queries
from schemas.send_request import SendRequest, validate_send_request

__all__ = ["EnqueueResult", "SendRequest", "enqueue"]


@dataclass(frozen=True)
class EnqueueResult:
    send_id: int
    created: bool  # False: a row with this dedupe key already existed; nothing was written


def enqueue(conn: psycopg.Connection, request: SendRequest) -> EnqueueResult:
    """Validate ``request`` and insert it unless its dedupe key exists.

    Raises :class:`mailbus.errors.InvalidSendError` before touching the database.
    """
    payload_json = validate_send_request(request).decode()
    queries = load_queries("relay", "queries.sql")
    row = conn.execute(
        queries["enqueue"],
        {
            "dedupe_key": request.dedupe_key,
            "to_address": request.to_address,
            "template": request.template,
            "payload_json": payload_json,
            "priority": request.priority,
            "expires_at": request.expires_at,
        },
    ).fetchone()
    if row is not None:
        return EnqueueResult(send_id=row[0], created=True)
    existing = conn.execute(
        queries["find_by_dedupe_key"], {"dedupe_key": request.dedupe_key}
    ).fetchone()
    if existing is None:  # the conflicting row was rolled back meanwhile: try once more
        return enqueue(conn, request)
    return EnqueueResult(send_id=existing[0], created=False)
