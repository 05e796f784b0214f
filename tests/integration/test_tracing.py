"""One mail, one trace (issue 22, item 8): a row enqueued with a W3C traceparent (as the
least-privilege enqueuer) → the real relay → the pointer's Kafka headers → the real Kafka
source and DeliveryService → the HTTP provider's request; with OpenTelemetry's in-memory
exporter, the claim, call and settle spans are in the enqueuer's trace. A malformed
traceparent is ignored and counted, and the mail goes out all the same. The intake gives
an OrderPlaced event's trace context to its row."""

from __future__ import annotations

import asyncio
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
from prometheus_client import REGISTRY
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.kafka_source import KafkaSource
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.provider import HttpProvider
from mailbus.intake.events import EventReader
from mailbus.intake.mappings import load_mappings
from mailbus.intake.rows import RowWriter
from mailbus.intake.service import Incoming, IntakeService
from mailbus.kernel.kafka_security import kafka_client_config
from mailbus.kernel.otel import OtelTracer
from mailbus.kernel.settings import Settings
from mailbus.kernel.tracing import NOOP, Tracer
from mailbus.relay.relay import Relay
from mailbus.schemas.codec import order_placed_codec
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


def relay_once(settings: Settings, expect: int) -> dict[str, Landed]:
    """One relay pass; the pointers as they landed on Kafka, by dedupe key."""
    relay = Relay(settings)
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


def test_one_mail_is_one_trace_from_the_insert_to_the_provider(
    settings: Settings, enqueuer_url: str
) -> None:
    key = f"traced-{uuid.uuid4().hex[:8]}"
    enqueue(enqueuer_url, key, TRACEPARENT, "vendor=abc")

    pointer = relay_once(settings, 1)[key]
    assert ("traceparent", TRACEPARENT.encode()) in pointer.headers
    assert ("tracestate", b"vendor=abc") in pointer.headers

    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    recording = deliver(settings, OtelTracer(tracing), [key])

    spans: dict[str, ReadableSpan] = {span.name: span for span in exporter.get_finished_spans()}
    assert {"mailbus.deliver", "mailbus.claim", "mailbus.provider_call", "mailbus.settle"} <= set(
        spans
    )
    for span in spans.values():
        assert format(span.context.trace_id, "032x") == TRACE_ID, span.name
    deliver_span = spans["mailbus.deliver"]
    assert deliver_span.parent is not None
    assert format(deliver_span.parent.span_id, "016x") == ENQUEUER_SPAN
    for name in ("mailbus.claim", "mailbus.provider_call", "mailbus.settle"):
        parent = spans[name].parent
        assert parent is not None and parent.span_id == deliver_span.context.span_id, name
    assert spans["mailbus.settle"].attributes["mailbus.status"] == "accepted"
    # the provider's side joins the trace under the call's span
    call_span = format(spans["mailbus.provider_call"].context.span_id, "016x")
    headers = recording.requests[key]
    assert headers["traceparent"] == f"00-{TRACE_ID}-{call_span}-01"
    assert headers["tracestate"] == "vendor=abc"


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
    assert pointers[traced].headers == (("traceparent", TRACEPARENT.encode()),)
    assert pointers[broken].headers == ()
    assert pointers[plain].headers == ()
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
