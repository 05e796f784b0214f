"""The enqueue helper for domain services: one call inside the caller's transaction.

    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("UPDATE orders SET state = 'shipped' WHERE id = %s", (1042,))
        enqueue(conn, SendRequest("order-1042-shipped", "ana@example.com", "order_shipped"))

The helper never commits: the row becomes visible to the relay exactly when the caller's
business change does, and a rollback leaves neither. Plain SQL inserts keep working, but
they get neither a policy's default expiry nor the queue bound: both live in this helper.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from mailbus_client.errors import InvalidSendError, QueueFullError
from mailbus_client.policies import PolicyBook, QueueCap, configured_policy_book
from mailbus_client.send_request import SendRequest, validate_send_request
from mailbus_client.sqlfiles import load_queries

__all__ = ["EnqueueResult", "PolicyBook", "QueueCap", "SendRequest", "enqueue"]


@dataclass(frozen=True)
class EnqueueResult:
    send_id: int
    created: bool  # False: a row with this dedupe key already existed; nothing was written


def enqueue(
    conn: psycopg.Connection[Any],
    request: SendRequest,
    *,
    policies: PolicyBook | None = None,
    cap: QueueCap | None = None,
    now: datetime | None = None,
) -> EnqueueResult:
    """Validate ``request`` and insert it unless its dedupe key exists.

    ``policies``: when ``request.expires_at`` is None and the template's policy has
    ``expire_after_s``, the row gets ``expires_at = now + expire_after_s``, where ``now``
    is the given time or else PostgreSQL's ``now()`` of the caller's transaction (the
    instant ``created_at`` gets). Default: the book MAILBUS_POLICY_FILE names, else the
    shipped ``mailbus_client/mail_policies.json`` (each file read once per process).

    ``cap``: the bound on open rows (``pending``, ``sending``, ``unknown``); default
    ``QueueCap.from_environ()`` (MAILBUS_QUEUE_CAP, unbounded when unset); pass
    ``QueueCap()`` to opt out. Past the threshold of ``request.priority`` (p2 first) it
    raises :class:`QueueFullError` and writes nothing; the caller's transaction stays
    usable, so it may drop the mail and commit, or roll back. A key already in the table
    returns ``created=False`` even when full. The count and the insert are one statement
    but not serialised: concurrent callers may overshoot a threshold by at most their
    number. Plain SQL inserts are never bounded.

    Raises :class:`InvalidSendError` before touching the database.
    """
    payload_json = validate_send_request(request).decode()
    if now is not None and now.tzinfo is None:
        raise InvalidSendError("now", "must be timezone-aware")
    book = configured_policy_book() if policies is None else policies
    bound = QueueCap.from_environ() if cap is None else cap
    expires_at, expire_after_s = request.expires_at, None
    if expires_at is None:
        policy = book.for_template(request.template)
        if now is None:
            expire_after_s = policy.expire_after_s  # computed in SQL, on the database clock
        else:
            expires_at = policy.default_expires_at(now)
    params: dict[str, Any] = {
        "dedupe_key": request.dedupe_key,
        "to_address": request.to_address,
        "template": request.template,
        "payload_json": payload_json,
        "priority": request.priority,
        "expires_at": expires_at,
        "expire_after_s": expire_after_s,
    }
    queries = load_queries("mailbus_client", "queries.sql")
    threshold = bound.threshold(request.priority)
    if threshold is None:
        row = conn.execute(queries["enqueue_with_policy"], params).fetchone()
        if row is not None:
            return EnqueueResult(send_id=row[0], created=True)
    else:
        counted = conn.execute(queries["enqueue_bounded"], {**params, "threshold": threshold})
        open_rows, send_id = counted.fetchone() or (0, None)
        if send_id is not None:
            return EnqueueResult(send_id=send_id, created=True)
        if open_rows >= threshold:  # refused, unless the key is already in: then a no-op
            existing = _find(conn, queries, request.dedupe_key)
            if existing is not None:
                return EnqueueResult(send_id=existing, created=False)
            raise QueueFullError(request.priority, open_rows, threshold, bound.limit or 0)
    existing = _find(conn, queries, request.dedupe_key)
    if existing is None:  # the conflicting row was rolled back meanwhile: try once more
        return enqueue(conn, request, policies=book, cap=bound, now=now)
    return EnqueueResult(send_id=existing, created=False)


def _find(conn: psycopg.Connection[Any], queries: dict[str, str], dedupe_key: str) -> int | None:
    row = conn.execute(queries["find_by_dedupe_key"], {"dedupe_key": dedupe_key}).fetchone()
    return None if row is None else int(row[0])
