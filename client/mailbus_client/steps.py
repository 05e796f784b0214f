"""The client's work as steps without I/O: each flow is a generator that yields the
:class:`Statement` to run and receives its rows, so one flow serves the synchronous and
the asynchronous driver alike (client.py) and is tested without a database.

Every statement runs in the caller's transaction; no step commits.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from mailbus_client.db_schema import DEFAULT_SCHEMA, qualified
from mailbus_client.errors import InvalidSendError, QueueFullError
from mailbus_client.policies import PolicyBook, QueueCap
from mailbus_client.send_request import SendRequest, validate_send_request
from mailbus_client.sqlfiles import load_queries
from mailbus_client.trace_context import TraceContext

__all__ = [
    "EnqueueResult",
    "Rows",
    "SendStatus",
    "Statement",
    "Steps",
    "cancel_steps",
    "client_queries",
    "enqueue_many_steps",
    "enqueue_steps",
    "row_values",
    "status_steps",
]

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Statement:
    sql: str
    params: dict[str, Any]


Steps = Generator[Statement, Rows, Any]


@dataclass(frozen=True)
class EnqueueResult:
    send_id: int
    created: bool  # False: a row with this dedupe key already existed; nothing was written


@dataclass(frozen=True)
class SendStatus:
    """What the enqueuing service may know of its send (Client.status)."""

    send_id: int
    status: str  # pending, sending, accepted, failed, unknown, expired, suppressed
    delivery_status: str | None  # the provider's latest event: delivered, bounced, ...
    attempts: int
    message_id: str | None
    next_try_at: datetime | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


@cache
def client_queries(schema: str = DEFAULT_SCHEMA) -> dict[str, str]:
    """The client's statements (queries.sql), naming ``schema``'s table and function."""
    return {
        name: qualified(sql, schema)
        for name, sql in load_queries("mailbus_client", "queries.sql").items()
    }


def row_values(
    request: SendRequest, book: PolicyBook, now: datetime | None, trace: TraceContext
) -> dict[str, Any]:
    """The columns of ``request``'s row (raises InvalidSendError). Times are left to the
    database (``delay_s``, ``expire_after_s``) unless ``now`` is given; ``trace`` is the
    context to record when the request names none."""
    payload_json = validate_send_request(request).decode()
    if now is not None and now.tzinfo is None:
        raise InvalidSendError("now", "must be timezone-aware")
    next_try_at, delay_s = None, None
    if isinstance(request.send_at, datetime):
        next_try_at = request.send_at
    elif isinstance(request.send_at, timedelta):
        if now is None:
            delay_s = request.send_at.total_seconds()
        else:
            next_try_at = now + request.send_at
    expires_at, expire_after_s = request.expires_at, None
    if expires_at is None:
        policy = book.for_template(request.template)
        send_time = next_try_at or now
        if send_time is None:
            expire_after_s = policy.expire_after_s  # from the send time, on the database clock
        else:
            expires_at = policy.default_expires_at(send_time)
    elif next_try_at is not None and expires_at <= next_try_at:
        raise InvalidSendError("send_at", "is not before expires_at: the mail would never go")
    traceparent, tracestate = (
        (request.traceparent, request.tracestate) if request.traceparent is not None else trace
    )
    return {
        "dedupe_key": request.dedupe_key,
        "to_address": request.to_address,
        "template": request.template,
        "payload_json": payload_json,
        "priority": request.priority,
        "next_try_at": next_try_at,
        "delay_s": delay_s,
        "expires_at": expires_at,
        "expire_after_s": expire_after_s,
        "traceparent": traceparent,
        "tracestate": tracestate,
    }


def enqueue_steps(
    request: SendRequest,
    book: PolicyBook,
    cap: QueueCap,
    trace: TraceContext,
    now: datetime | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> Generator[Statement, Rows, EnqueueResult]:
    """Insert ``request`` unless its key exists; past ``cap`` raise QueueFullError (a key
    already in the table is a no-op even then)."""
    params = row_values(request, book, now, trace)
    queries = client_queries(schema)
    threshold = cap.threshold(request.priority)
    while True:
        if threshold is None:
            rows = yield Statement(queries["enqueue_with_policy"], params)
            if rows:
                return EnqueueResult(send_id=rows[0][0], created=True)
        else:
            rows = yield Statement(queries["enqueue_bounded"], {**params, "threshold": threshold})
            open_rows, send_id = rows[0] if rows else (0, None)
            if send_id is not None:
                return EnqueueResult(send_id=send_id, created=True)
            if open_rows >= threshold:  # refused, unless the key is already in: then a no-op
                found = yield Statement(queries["find_by_dedupe_key"], params)
                if found:
                    return EnqueueResult(send_id=found[0][0], created=False)
                raise QueueFullError(request.priority, open_rows, threshold, cap.limit or 0)
        found = yield Statement(queries["find_by_dedupe_key"], params)
        if found:
            return EnqueueResult(send_id=found[0][0], created=False)
        # the conflicting row was rolled back meanwhile: insert again


def enqueue_many_steps(
    requests: Sequence[SendRequest],
    book: PolicyBook,
    cap: QueueCap,
    trace: TraceContext,
    now: datetime | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> Generator[Statement, Rows, list[EnqueueResult]]:
    """Insert every request whose key is not in the table, in one statement; results in
    the order of ``requests``. A key given twice is written once (the first), the second
    is ``created=False``. With ``cap``, the batch is refused whole (QueueFullError for its
    lowest priority, nothing written) when its new rows would pass the threshold."""
    first: dict[str, int] = {}  # dedupe key -> index of its first request
    values = []
    for index, request in enumerate(requests):
        row = row_values(request, book, now, trace)  # every request checked before any I/O
        if request.dedupe_key not in first:
            first[request.dedupe_key] = index
            values.append(row)
    results: dict[str, EnqueueResult] = {}
    while values:
        threshold, priority = _batch_threshold(cap, values)
        columns = {name: [row[name] for row in values] for name in values[0]}
        rows = yield Statement(
            client_queries(schema)["enqueue_many"], {**columns, "threshold": threshold}
        )
        if rows and not rows[0][3]:
            raise QueueFullError(priority, rows[0][2], threshold or 0, cap.limit or 0)
        again = []
        for row, (send_id, created, _, _) in zip(values, rows, strict=True):
            if send_id is None:
                again.append(row)  # committed by another transaction after our snapshot
            else:
                results[row["dedupe_key"]] = EnqueueResult(send_id=send_id, created=created)
        values = again
    return [
        results[r.dedupe_key] if first[r.dedupe_key] == i else _again(results[r.dedupe_key])
        for i, r in enumerate(requests)
    ]


def _again(result: EnqueueResult) -> EnqueueResult:
    return EnqueueResult(send_id=result.send_id, created=False)


def _batch_threshold(cap: QueueCap, values: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The strictest threshold among the batch's priorities, and that priority."""
    found: list[tuple[int, str]] = []
    for priority in sorted({row["priority"] for row in values}):
        threshold = cap.threshold(priority)
        if threshold is not None:
            found.append((threshold, priority))
    if not found:
        return None, ""
    return min(found)


def status_steps(
    key: str, schema: str = DEFAULT_SCHEMA
) -> Generator[Statement, Rows, SendStatus | None]:
    rows = yield Statement(client_queries(schema)["send_status"], {"key": key})
    return SendStatus(*rows[0]) if rows else None


def cancel_steps(
    key: str, by: str | None, schema: str = DEFAULT_SCHEMA
) -> Generator[Statement, Rows, bool]:
    """True when the send ``key`` was pending with no attempt made and is now expired."""
    rows = yield Statement(client_queries(schema)["cancel_send"], {"key": key, "by": by})
    return bool(rows) and rows[0][0] is not None
