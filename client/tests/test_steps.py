"""The client's flows without a database (mailbus_client/steps.py): which statement each
step asks for, with which values, and what it makes of the rows it gets back."""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mailbus_client import (
    Client,
    ConfigError,
    InvalidSendError,
    QueueCap,
    QueueFullError,
    SendRequest,
)
from mailbus_client.policies import configured_policy_book
from mailbus_client.steps import (
    EnqueueResult,
    Rows,
    Statement,
    cancel_steps,
    client_queries,
    enqueue_many_steps,
    enqueue_steps,
    row_values,
)
from mailbus_client.trace_context import current_trace_context

BOOK = configured_policy_book({})  # the shipped book: password_reset expires after 15 min
NO_TRACE = (None, None)
NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def drive(flow: Generator[Statement, Rows, Any], *answers: Rows) -> tuple[list[Statement], Any]:
    """Run ``flow`` answering each statement with the next of ``answers``."""
    asked = [next(flow)]
    for rows in answers:
        try:
            asked.append(flow.send(rows))
        except StopIteration as done:
            return asked, done.value
    raise AssertionError(f"the flow asked for more: {asked[-1].sql[:60]}")


def test_a_delay_is_left_to_the_database_clock_and_the_expiry_counts_from_it() -> None:
    request = SendRequest("k", "a@x.org", "password_reset", send_at=timedelta(hours=1))
    values = row_values(request, BOOK, None, NO_TRACE)
    assert values["next_try_at"] is None and values["delay_s"] == 3600
    assert values["expires_at"] is None and values["expire_after_s"] == 900


def test_an_instant_schedules_and_the_policy_expiry_counts_from_the_send_time() -> None:
    at = NOW + timedelta(days=1)
    values = row_values(
        SendRequest("k", "a@x.org", "password_reset", send_at=at), BOOK, None, NO_TRACE
    )
    assert values["next_try_at"] == at and values["delay_s"] is None
    assert values["expires_at"] == at + timedelta(minutes=15)


def test_a_delay_with_a_given_now_is_an_instant() -> None:
    request = SendRequest("k", "a@x.org", "welcome", send_at=timedelta(minutes=5))
    assert row_values(request, BOOK, NOW, NO_TRACE)["next_try_at"] == NOW + timedelta(minutes=5)


@pytest.mark.parametrize(
    "send_at",
    [
        datetime(2030, 1, 1),  # naive
        timedelta(seconds=-1),
        NOW + timedelta(hours=2),  # after expires_at
        "tomorrow",
    ],
)
def test_a_bad_schedule_is_refused(send_at: Any) -> None:
    request = SendRequest("k", "a@x.org", "welcome", expires_at=NOW + timedelta(hours=1))
    request = SendRequest(**{**request.__dict__, "send_at": send_at})
    with pytest.raises(InvalidSendError) as error:
        row_values(request, BOOK, None, NO_TRACE)
    assert error.value.field == "send_at"


def test_an_explicit_trace_context_overrides_the_current_one() -> None:
    current = ("00-" + "1" * 32 + "-" + "2" * 16 + "-01", "vendor=current")
    plain = row_values(SendRequest("k", "a@x.org", "welcome"), BOOK, None, current)
    assert (plain["traceparent"], plain["tracestate"]) == current
    given = SendRequest("k", "a@x.org", "welcome", traceparent=PARENT)
    chosen = row_values(given, BOOK, None, current)
    assert (chosen["traceparent"], chosen["tracestate"]) == (PARENT, None)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"traceparent": "not-a-traceparent"}, "traceparent"),
        ({"traceparent": PARENT + "\n"}, "traceparent"),
        ({"tracestate": "a=b\r\nX: y"}, "tracestate"),
        ({"tracestate": "a=" + "b" * 600}, "tracestate"),
    ],
)
def test_a_bad_trace_context_is_refused(fields: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidSendError) as error:
        row_values(SendRequest("k", "a@x.org", "welcome", **fields), BOOK, None, NO_TRACE)  # type: ignore[arg-type]
    assert error.value.field == field


def test_no_span_or_no_opentelemetry_no_trace_context() -> None:
    assert current_trace_context() == (None, None)


def test_the_current_span_context_is_taken_when_a_span_is_active() -> None:
    trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
    with trace_sdk.TracerProvider().get_tracer("t").start_as_current_span("business") as span:
        traceparent, _ = current_trace_context()
    context = span.get_span_context()
    flags = int(context.trace_flags)
    assert traceparent == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def test_enqueue_finds_the_existing_row_of_a_duplicate() -> None:
    flow = enqueue_steps(SendRequest("k", "a@x.org", "welcome"), BOOK, QueueCap(), NO_TRACE)
    asked, result = drive(flow, [], [(7,)])
    queries = client_queries()
    assert [s.sql for s in asked] == [queries["enqueue_with_policy"], queries["find_by_dedupe_key"]]
    assert result == EnqueueResult(send_id=7, created=False)


def test_enqueue_refused_by_the_cap_writes_nothing_and_says_why() -> None:
    flow = enqueue_steps(
        SendRequest("k", "a@x.org", "welcome", priority="p2"), BOOK, QueueCap(10), NO_TRACE
    )
    with pytest.raises(QueueFullError) as error:
        drive(flow, [(6, None)], [])
    assert (error.value.priority, error.value.open_rows, error.value.threshold) == ("p2", 6, 6)


def test_enqueue_many_is_one_statement_with_one_array_per_column() -> None:
    requests = [SendRequest(f"k-{n}", f"u{n}@x.org", "welcome") for n in range(3)]
    asked, results = drive(
        enqueue_many_steps(requests, BOOK, QueueCap(), NO_TRACE),
        [(1, True, 0, True), (9, False, 0, True), (2, True, 0, True)],
    )
    assert len(asked) == 1
    assert asked[0].params["dedupe_key"] == ["k-0", "k-1", "k-2"]
    assert asked[0].params["threshold"] is None
    assert [(r.send_id, r.created) for r in results] == [(1, True), (9, False), (2, True)]


def test_enqueue_many_writes_a_key_given_twice_once() -> None:
    requests = [SendRequest("k", "a@x.org", "welcome"), SendRequest("k", "b@x.org", "welcome")]
    asked, results = drive(
        enqueue_many_steps(requests, BOOK, QueueCap(), NO_TRACE), [(4, True, 0, True)]
    )
    assert asked[0].params["to_address"] == ["a@x.org"]
    assert results == [EnqueueResult(4, True), EnqueueResult(4, False)]


def test_enqueue_many_asks_again_for_rows_committed_after_its_snapshot() -> None:
    requests = [SendRequest("k-1", "a@x.org", "welcome"), SendRequest("k-2", "b@x.org", "welcome")]
    asked, results = drive(
        enqueue_many_steps(requests, BOOK, QueueCap(), NO_TRACE),
        [(1, True, 0, True), (None, False, 0, True)],
        [(5, False, 0, True)],
    )
    assert asked[1].params["dedupe_key"] == ["k-2"]
    assert results == [EnqueueResult(1, True), EnqueueResult(5, False)]


def test_enqueue_many_checks_every_request_before_any_statement() -> None:
    requests = [SendRequest("k-1", "a@x.org", "welcome"), SendRequest("k-2", "nope", "welcome")]
    with pytest.raises(InvalidSendError):
        next(enqueue_many_steps(requests, BOOK, QueueCap(), NO_TRACE))


def test_enqueue_many_is_capped_at_its_lowest_priority() -> None:
    requests = [
        SendRequest("k-1", "a@x.org", "welcome", priority="p0"),
        SendRequest("k-2", "b@x.org", "welcome", priority="p2"),
    ]
    flow = enqueue_many_steps(requests, BOOK, QueueCap(100), NO_TRACE)
    assert next(flow).params["threshold"] == 60
    with pytest.raises(QueueFullError) as error:
        flow.send([(None, False, 59, False), (None, False, 59, False)])
    assert (error.value.priority, error.value.open_rows) == ("p2", 59)


def test_cancel_says_whether_a_send_was_cancelled() -> None:
    assert drive(cancel_steps("k", None), [(3,)])[1] is True
    assert drive(cancel_steps("k", "ana"), [(None,)])[1] is False


def test_every_statement_names_mailbus_schema() -> None:
    """The application's connection has a search_path of its own: the client's statements
    name the schema (MAILBUS_DB_SCHEMA), never rely on the path."""
    asked, _ = drive(
        enqueue_steps(
            SendRequest("k", "a@x.org", "welcome"), BOOK, QueueCap(), NO_TRACE, schema="mb_x"
        ),
        [(1,)],
    )
    cancel, _ = drive(cancel_steps("k", None, "mb_x"), [(3,)])
    assert 'INTO "mb_x".email_sends' in asked[0].sql
    assert 'SELECT "mb_x".mailbus_cancel_send(' in cancel[0].sql
    for sql in client_queries("mb_x").values():
        assert "{schema}" not in sql and '"mb_x".' in sql


@pytest.mark.parametrize("bad", ["Mail-Bus", "public", "pg_x", "1x", "x" * 64])
def test_a_schema_that_is_no_plain_identifier_is_refused_at_once(bad: str) -> None:
    assert Client().schema == Client.from_environ({}).schema == "mailbus"
    with pytest.raises(ConfigError, match="schema"):
        Client(schema=bad)
    with pytest.raises(ConfigError, match="MAILBUS_DB_SCHEMA"):
        Client.from_environ({"MAILBUS_DB_SCHEMA": bad})
