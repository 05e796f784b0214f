"""W3C trace context as values (issue 22, item 8): parse, validate, format, carry; the
setting that turns the export on; no OpenTelemetry without it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.extras import MissingExtra
from mailbus.kernel.logs import JsonFormatter
from mailbus.kernel.metrics import observe_accepted
from mailbus.kernel.settings import load_settings
from mailbus.kernel.tracecontext import Carried, TraceContext, from_headers, parse
from mailbus.kernel.tracing import NOOP, current, use

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


def test_a_valid_traceparent_is_read_and_formatted_back() -> None:
    carried = parse(VALID, "congo=t61rcWkgMzE")
    assert carried == Carried(TraceContext(TRACE_ID, PARENT_ID, 1, "congo=t61rcWkgMzE"))
    assert carried.context is not None
    assert carried.context.traceparent == VALID and carried.context.sampled
    assert carried.context.headers() == (
        ("traceparent", VALID.encode()),
        ("tracestate", b"congo=t61rcWkgMzE"),
    )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        VALID.upper(),  # hex digits are lowercase
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is invalid
        f"00-{TRACE_ID}-{PARENT_ID}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE_ID}-{PARENT_ID}-0g",
        f"00_{TRACE_ID}_{PARENT_ID}_01",
        f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",
        f"01-{TRACE_ID}-{PARENT_ID}-01x",  # a future version's fifth field needs a dash
    ],
)
def test_a_malformed_traceparent_is_ignored_and_said_to_be_malformed(value: str) -> None:
    assert parse(value, "congo=t61rcWkgMzE") == Carried(None, malformed=True)


def test_no_traceparent_is_no_context_and_not_malformed() -> None:
    assert parse(None, "congo=x") == Carried(None)
    assert from_headers(None) == Carried(None)
    assert from_headers([("mailbus-reason", b"x")]) == Carried(None)


def test_a_future_version_is_read_by_its_first_four_fields() -> None:
    carried = parse(f"cc-{TRACE_ID}-{PARENT_ID}-01-what-the-future-adds")
    assert carried.context == TraceContext(TRACE_ID, PARENT_ID, 1)


@pytest.mark.parametrize("state", ["", "x" * 513, "a=\u00e9", "a=b\nc=d"])
def test_a_bad_tracestate_is_dropped_and_the_traceparent_kept(state: str) -> None:
    assert parse(VALID, state) == Carried(TraceContext(TRACE_ID, PARENT_ID, 1))


def test_headers_are_read_case_insensitively_first_one_wins() -> None:
    headers = [
        ("TraceParent", VALID.encode()),
        ("traceparent", b"garbage"),
        ("tracestate", "k=v"),
    ]
    assert from_headers(headers) == Carried(TraceContext(TRACE_ID, PARENT_ID, 1, "k=v"))
    assert from_headers({"traceparent": VALID}).context is not None
    assert from_headers([("traceparent", b"\xff\xfe")]) == Carried(None, malformed=True)
    assert from_headers([("traceparent", None)]) == Carried(None, malformed=True)


@given(
    trace_id=st.from_regex(r"\A[0-9a-f]{32}\Z").filter(lambda s: s != "0" * 32),
    parent_id=st.from_regex(r"\A[0-9a-f]{16}\Z").filter(lambda s: s != "0" * 16),
    flags=st.integers(0, 255),
)
def test_what_is_formatted_parses_back_to_itself(trace_id: str, parent_id: str, flags: int) -> None:
    context = TraceContext(trace_id, parent_id, flags)
    assert parse(context.traceparent) == Carried(context)
    assert from_headers(context.headers()) == Carried(context)


@given(st.text(max_size=80))
def test_any_text_parses_or_is_malformed_never_raises(text: str) -> None:
    carried = parse(text)
    assert (carried.context is None) == carried.malformed


def test_the_noop_tracer_makes_the_parent_current_only_inside_its_span() -> None:
    context = TraceContext(TRACE_ID, PARENT_ID, 1)
    with NOOP.span("x") as span:
        span.set("k", 1)
        assert current() is None
    with NOOP.span("x", context):
        assert current() == context
        with NOOP.span("child"):
            assert current() == context
    assert current() is None


def test_a_started_noop_span_carries_its_parent_on_and_is_never_current() -> None:
    context = TraceContext(TRACE_ID, PARENT_ID, 1)
    span = NOOP.start("send t", context, {"messaging.system": "kafka"})
    assert span.context == context and current() is None
    span.end("not_acknowledged")
    assert NOOP.start("send t", None).context is None


def test_a_log_line_inside_a_mail_span_carries_its_trace() -> None:
    record = logging.LogRecord("mailbus.x", logging.INFO, __file__, 1, "outcome", None, None)
    assert "trace_id" not in json.loads(JsonFormatter().format(record))
    with use(TraceContext(TRACE_ID, PARENT_ID, 1)):
        line = json.loads(JsonFormatter().format(record))
    assert (line["trace_id"], line["span_id"]) == (TRACE_ID, PARENT_ID)


def test_a_sampled_trace_is_the_histogram_exemplar() -> None:
    from prometheus_client import REGISTRY
    from prometheus_client.openmetrics.exposition import generate_latest

    def exemplars() -> list[str]:
        return [
            line
            for line in generate_latest(REGISTRY).decode().splitlines()
            if line.startswith("mailbus_enqueue_to_accepted_seconds_bucket") and "#" in line
        ]

    unsampled = "ab" * 16
    observe_accepted("p2", 0.3, TraceContext(unsampled, PARENT_ID, 0))
    assert not any(unsampled in line for line in exemplars())
    observe_accepted("p2", 0.3, TraceContext(TRACE_ID, PARENT_ID, 1))
    assert any(
        f'{{span_id="{PARENT_ID}",trace_id="{TRACE_ID}"}} 0.3' in line and 'priority="p2"' in line
        for line in exemplars()
    ), exemplars()


@pytest.mark.parametrize(
    ("env", "exporter"),
    [
        ({}, None),
        ({"MAILBUS_OTEL_EXPORTER": "OTLP"}, "otlp"),
        ({"MAILBUS_OTEL_EXPORTER": "console"}, "console"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
        (
            {"MAILBUS_OTEL_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
            None,
        ),
    ],
)
def test_the_exporter_setting(env: dict[str, str], exporter: str | None) -> None:
    assert load_settings(env).otel_exporter == exporter


def test_an_unknown_exporter_is_bad_configuration() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"MAILBUS_OTEL_EXPORTER": "jaeger"})
    assert raised.value.setting == "MAILBUS_OTEL_EXPORTER"


def test_the_delivery_path_imports_no_opentelemetry_unless_configured() -> None:
    probe = (
        "import sys, asyncio\n"
        "from mailbus.consumer import runner, service, kafka_source, provider\n"
        "from mailbus.relay import relay\n"
        "from mailbus.intake import service as intake\n"
        "from mailbus.feedback import server\n"
        "from mailbus.kernel import logs, tracers, tracing\n"
        "assert tracers.configured_tracer(None, 'mailbus-relay') is tracing.NOOP\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo / "client")},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_configured_exporter_loads_opentelemetry() -> None:
    from mailbus.kernel.otel import OtelTracer, span_exporter
    from mailbus.kernel.tracers import configured_tracer

    assert isinstance(configured_tracer("console", "mailbus-consumer"), OtelTracer)
    assert type(span_exporter("otlp")).__name__ == "OTLPSpanExporter"


def test_an_exporter_without_opentelemetry_installed_is_bad_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mailbus.kernel import otel
    from mailbus.kernel.tracers import configured_tracer

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    monkeypatch.delitem(sys.modules, otel.__name__)
    monkeypatch.delattr(sys.modules["mailbus.kernel"], "otel")
    with pytest.raises(ConfigError) as raised:
        configured_tracer("otlp", "mailbus-consumer")
    assert isinstance(raised.value, MissingExtra) and raised.value.extra == "tracing"
    assert "pip install 'mailbus[tracing]'" in raised.value.problem
