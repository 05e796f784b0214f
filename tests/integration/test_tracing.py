"""One mail, one trace (issue 22, item 8; issue 36, item 5): a row enqueued with a W3C
traceparent (as the least-privilege enqueuer) → the real relay → the pointer's Kafka headers
→ the real Kafka source and DeliveryService → the HTTP provider's request → the provider's
delivery event at the webhook receiver's store; with OpenTelemetry's in-memory exporter, the
relay's send span, the consumer's process, claim, call and settle spans and the webhook's
event span are in the enqueuer's trace, the mail's log lines carry its trace id, and the
latency histograms' exemplars point at it. A malformed traceparent is ignored and counted,
and the mail goes out all the same. The intake gives an OrderPlaced event's trace context
to its row."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import psycopg
import pytest
from confluent_kafka import Producer
from delivery_support import service_for
from kafka_reader import Landed, read_messages
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY
from prometheus_client.openmetrics.exposition import generate_latest
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.kafka_source import KafkaSource
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.provider import HttpProvider
from mailbus.feedback.events import make_event
from mailbus.feedback.store import EventStore
from mailbus.intake.events import EventReader
from mailbus.intake.mappings import load_mappings
from mailbus.intake.rows import RowWriter
from mailbus.intake.service import Incoming, IntakeService
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.logs import JsonFormatter
from mailbus.kernel.otel import OtelTracer
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.relay.relay import Relay
from mailbus.schemas.codec import order_placed_codec
from mailbus.schemas.pointer_headers import FIRST_ATTEMPT
from mailbus_client.policies import configured_policy_book

pytestmark = pytest.mark.stack

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ENQUEUER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{ENQUEUER_SPAN}-01"


class RecordingProvider:
    """The provider's side of the wire: accepts every send, keeps each request's headers."""

    def __init__(self) -> None:
        self.requests: dict[str, httpx.Headers] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = request.headers["Idempotency-Key"]
        self.requests[key] = request.headers
        return httpx.Response(200, json={"id": f"msg-{key}"})


@pytest.fixture
def enqueuer_url(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_enqueuer") as url:
        yield url


def enqueue(url: str, key: str, traceparent: str | None, tracestate: str | None = None) -> None:
    """A domain service's own INSERT, giving the mail its trace context."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, traceparent, tracestate)"
            " VALUES (%s, 'ana@example.com', 'welcome', %s, %s)"
            " ON CONFLICT (dedupe_key) DO NOTHING",
            (key, traceparent, tracestate),
        )


def relay_once(settings: Settings, expect: int, tracer: Tracer = NOOP) -> dict[str, Landed]:
    """One relay pass; the pointers as they landed on Kafka, by dedupe key."""
    relay = Relay(settings, tracer=tracer)
    try:
        assert relay.publish_due_batch(threading.Event()) == expect
    finally:
        relay.close()
    landed = read_messages(settings.kafka_bootstrap, [settings.topic("p1")], expect, 30)
    return {message.key.decode(): message for message in landed if message.key}


def deliver(
    settings: Settings, tracer: Tracer, keys: list[str], also: Callable[[], bool] = lambda: True
) -> RecordingProvider:
    """The consumer's Kafka source and delivery service, until every key is accepted (and
    ``also`` holds)."""
    recording = RecordingProvider()
    provider = HttpProvider(
        "http://provider.test", "key", 2.0, 5.0, 4, transport=httpx.MockTransport(recording)
    )

    async def scenario() -> None:
        ledger = SendLedger(settings.database_url, max_connections=2, lease_s=30)
        await ledger.open()
        stop = threading.Event()
        service = service_for(ledger, provider, RetryPolicy(5, 1.0, 10.0), tracer=tracer)  # type: ignore[arg-type]
        source = KafkaSource(
            client_config=kafka_client_config(settings),
            group_id=f"{settings.topic_prefix}.delivery.p1",
            topic=settings.topic("p1"),
            handler=service.handle,
            loop=asyncio.get_running_loop(),
            max_outstanding=8,
            drain_s=5.0,
            stop=stop,
        )
        source.start()
        try:
            for _ in range(300):
                if accepted(settings.database_url) >= len(keys) and also():
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.to_thread(source.join, 30)
            await ledger.close()
            await provider.aclose()
        assert source.failure is None

    asyncio.run(scenario())
    assert accepted(settings.database_url) == len(keys)
    return recording


def accepted(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM email_sends WHERE status = 'accepted'").fetchone()
    return int(row[0]) if row else 0


def malformed(where: str) -> float:
    value = REGISTRY.get_sample_value("mailbus_trace_context_malformed_total", {"where": where})
    return value or 0.0


class LogLines(logging.Handler):
    """The process's log lines as the JSON formatter writes them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    handler, mailbus = LogLines(), logging.getLogger("mailbus")
    level = mailbus.level
    mailbus.addHandler(handler)
    mailbus.setLevel(logging.INFO)
    yield handler
    mailbus.removeHandler(handler)
    mailbus.setLevel(level)


def apply_delivery_event(settings: Settings, tracer: Tracer, message_id: str) -> None:
    """The provider's ``delivered`` event, as the webhook receiver stores it."""

    async def scenario() -> None:
        store = EventStore(settings.database_url, tracer=tracer)
        await store.open()
        try:
            event = make_event(f"evt-{message_id}", "delivered", message_id, "2026-12-06T12:00:00Z")
            recorded = await store.record("http", event)
        finally:
            await store.close()
        assert (recorded.new, recorded.matched) == (True, True)

    asyncio.run(scenario())


def exemplar_traces(metric: str) -> set[str]:
    """The trace ids of ``metric``'s exemplars, as an OpenMetrics scrape shows them."""
    exposition = generate_latest(REGISTRY).decode()
    return {
        line.split('trace_id="', 1)[1][:32]
        for line in exposition.splitlines()
        if line.startswith(f"{metric}_bucket") and 'trace_id="' in line
    }


def test_one_mail_is_one_trace_from_the_insert_to_the_provider_and_its_events(
    settings: Settings, enqueuer_url: str, log_lines: LogLines
) -> None:
    key = f"traced-{uuid.uuid4().hex[:8]}"
    enqueue(enqueuer_url, key, TRACEPARENT, "vendor=abc")
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OtelTracer(tracing)
    topic = settings.topic("p1")

    pointer = relay_once(settings, 1, tracer)[key]
    recording = deliver(settings, tracer, [key])
    apply_delivery_event(settings, tracer, f"msg-{key}")

    spans: dict[str, ReadableSpan] = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {
        f"send {topic}",
        f"process {topic}",
        "mailbus.claim",
        "POST",
        f"settle {topic}",
        "mailbus.event_applied",
    }
    for span in spans.values():  # one mail, one trace
        assert format(span.context.trace_id, "032x") == TRACE_ID, span.name

    def span_id(name: str) -> str:
        return format(spans[name].context.span_id, "016x")

    def parent_of(name: str) -> str:
        parent = spans[name].parent
        assert parent is not None, name
        return format(parent.span_id, "016x")

    # the relay's send span is the enqueuer's child, and the pointer carries it on
    send = spans[f"send {topic}"]
    assert send.kind is SpanKind.PRODUCER
    assert parent_of(f"send {topic}") == ENQUEUER_SPAN
    assert send.attributes["messaging.system"] == "kafka"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.name"] == topic
    sent = f"00-{TRACE_ID}-{span_id(f'send {topic}')}-01"
    assert ("traceparent", sent.encode()) in pointer.headers
    assert ("tracestate", b"vendor=abc") in pointer.headers
    # the consumer's process span continues it; claim, call and settle are its children
    process = spans[f"process {topic}"]
    assert process.kind is SpanKind.CONSUMER
    assert parent_of(f"process {topic}") == span_id(f"send {topic}")
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["messaging.kafka.message.key"] == key
    for name in ("mailbus.claim", "POST", f"settle {topic}"):
        assert parent_of(name) == span_id(f"process {topic}"), name
    call = spans["POST"]
    assert call.kind is SpanKind.CLIENT
    assert call.attributes["http.request.method"] == "POST"
    assert call.attributes["server.address"] == "provider.test"
    assert call.attributes["http.response.status_code"] == 200
    assert spans[f"settle {topic}"].attributes["messaging.operation.type"] == "settle"
    assert spans[f"settle {topic}"].attributes["mailbus.status"] == "accepted"
    # the provider's side joins the trace under the call's span
    headers = recording.requests[key]
    assert headers["traceparent"] == f"00-{TRACE_ID}-{span_id('POST')}-01"
    assert headers["tracestate"] == "vendor=abc"
    # the webhook's event is in the mail's trace, under the row's context
    assert parent_of("mailbus.event_applied") == ENQUEUER_SPAN
    assert spans["mailbus.event_applied"].attributes["mailbus.event.type"] == "delivered"

    # the mail's log lines carry its trace: the outcome and the event applied
    mails = [line for line in log_lines.lines if key in json.dumps(line)]
    assert {line["msg"] for line in mails} >= {"outcome", "delivery event applied"}
    for line in mails:
        assert line["trace_id"] == TRACE_ID, line
    outcome = next(line for line in mails if line["msg"] == "outcome")
    assert outcome["span_id"] == span_id(f"process {topic}")
    # the latency histograms' exemplars point at the mail's trace
    assert TRACE_ID in exemplar_traces("mailbus_enqueue_to_accepted_seconds")
    assert TRACE_ID in exemplar_traces("mailbus_relay_publish_delay_seconds")


def test_without_an_exporter_the_context_is_passed_on_and_a_malformed_one_ignored(
    settings: Settings, enqueuer_url: str
) -> None:
    traced, broken, plain = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in "tbp")
    enqueue(enqueuer_url, traced, TRACEPARENT)
    enqueue(enqueuer_url, broken, "00-not-a-trace-01")
    enqueue(enqueuer_url, plain, None)
    before = malformed("relay")

    pointers = relay_once(settings, 3)
    assert malformed("relay") == before + 1
    first = (FIRST_ATTEMPT, b"welcome")  # each row is new (schemas/pointer_headers.py)
    assert pointers[traced].headers == (("traceparent", TRACEPARENT.encode()), first)
    assert pointers[broken].headers == (first,)
    assert pointers[plain].headers == (first,)
    # a duplicate of a pointer, its header malformed on the way: counted, then harmless
    producer = Producer(kafka_client_config(settings))
    producer.produce(
        settings.topic("p1"),
        key=plain.encode(),
        value=pointers[plain].value,
        headers=[("traceparent", b"00-bogus")],
    )
    assert producer.flush(10) == 0
    before = malformed("consumer")

    recording = deliver(
        settings, NOOP, [traced, broken, plain], lambda: malformed("consumer") > before
    )
    assert malformed("consumer") == before + 1
    assert recording.requests[traced]["traceparent"] == TRACEPARENT  # the enqueuer's, as is
    assert "traceparent" not in recording.requests[broken]
    assert "traceparent" not in recording.requests[plain]


def _order(order_id: str) -> bytes:
    return order_placed_codec().encode(
        {
            "event_id": f"evt-{order_id}",
            "order_id": order_id,
            "customer_email": "buyer@example.com",
            "occurred_at": int(time.time() * 1000),
        }
    )


def test_the_intake_gives_the_row_the_trace_context_of_its_event(database_url: str) -> None:
    traced = (("traceparent", TRACEPARENT.encode()), ("tracestate", b"shop=1"))
    events = {"T1": traced, "T2": (("traceparent", b"00-zz-01"),), "T3": ()}
    batch = [
        Incoming("orders.events", 0, n, b"k", _order(order), headers)
        for n, (order, headers) in enumerate(events.items())
    ]
    reader = EventReader(load_mappings(None), configured_policy_book())
    apply_roles(database_url)
    before = malformed("intake")
    with login_as(database_url, "mailbus_intake") as url:
        writer = RowWriter(url, 3 * 24 * 3600)
        prepared = IntakeService(reader, writer, None).prepare(batch)  # type: ignore[arg-type]
        asyncio.run(writer.insert(prepared.document, []))
        asyncio.run(writer.close())
    assert malformed("intake") == before + 1
    with psycopg.connect(database_url) as conn:
        rows = dict(
            conn.execute(
                "SELECT dedupe_key, (traceparent, tracestate)::text FROM email_sends"
                " WHERE dedupe_key LIKE 'order-T%'"
            ).fetchall()
        )
    assert rows == {
        "order-T1-confirmation": f"({TRACEPARENT},shop=1)",
        "order-T2-confirmation": "(,)",
        "order-T3-confirmation": "(,)",
    }


def test_with_an_exporter_the_intake_row_continues_the_events_process_span(
    database_url: str,
) -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    traced = (("traceparent", TRACEPARENT.encode()),)
    batch = [Incoming("orders.events", 2, 41, b"k", _order("S1"), traced)]
    reader = EventReader(load_mappings(None), configured_policy_book())
    apply_roles(database_url)
    with login_as(database_url, "mailbus_intake") as url:
        writer = RowWriter(url, 3 * 24 * 3600)
        service = IntakeService(reader, writer, None, OtelTracer(tracing))  # type: ignore[arg-type]
        asyncio.run(writer.insert(service.prepare(batch).document, []))
        asyncio.run(writer.close())
    [span] = exporter.get_finished_spans()
    assert span.name == "process orders.events" and span.kind is SpanKind.CONSUMER
    assert span.parent is not None and format(span.parent.span_id, "016x") == ENQUEUER_SPAN
    assert span.attributes["messaging.kafka.offset"] == 41
    own = format(span.context.span_id, "016x")
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT traceparent FROM email_sends WHERE dedupe_key = 'order-S1-confirmation'"
        ).fetchone()
    assert row == (f"00-{TRACE_ID}-{own}-01",)
