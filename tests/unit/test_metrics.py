"""The metrics API changes the samples of the default registry as documented."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest

from mailbus.kernel import metrics

STATS = Path(__file__).parent / "data" / "librdkafka_consumer_stats.json"
_EXPOSITION = (
    "import mailbus.kernel.metrics; from prometheus_client import generate_latest;"
    " print(generate_latest().decode())"
)


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_label_sets_exist_before_the_first_event() -> None:
    """In a fresh interpreter: a test that ran a consumer in this process before (the
    lanes hand a process files in turn) has counted its events."""
    text = subprocess.run(
        [sys.executable, "-c", _EXPOSITION], capture_output=True, text=True, check=True
    ).stdout
    assert 'mailbus_sends_total{outcome="failed",priority="p0"} 0.0' in text
    assert 'mailbus_provider_requests_total{kind="lookup"}' in text
    assert "mailbus_provider_rate_limited_total 0.0" in text
    assert "_created" not in text


def test_observe_call_counts_outcome_request_and_latency() -> None:
    before_sends = sample("mailbus_sends_total", priority="p1", outcome="accepted")
    before_requests = sample("mailbus_provider_requests_total", kind="send")
    before_count = sample("mailbus_provider_latency_seconds_count")
    before_fast = sample("mailbus_provider_latency_seconds_bucket", le="0.05")
    before_429 = sample("mailbus_provider_rate_limited_total")

    metrics.observe_call("p1", "accepted", 0.042, 202)

    assert sample("mailbus_sends_total", priority="p1", outcome="accepted") == before_sends + 1
    assert sample("mailbus_provider_requests_total", kind="send") == before_requests + 1
    assert sample("mailbus_provider_latency_seconds_count") == before_count + 1
    assert sample("mailbus_provider_latency_seconds_bucket", le="0.05") == before_fast + 1
    assert sample("mailbus_provider_rate_limited_total") == before_429


def test_observe_call_counts_a_429() -> None:
    before_deprecated = sample("mailbus_provider_429_total")
    before_429 = sample("mailbus_provider_rate_limited_total")
    before_pending = sample("mailbus_sends_total", priority="p2", outcome="pending")
    metrics.observe_call("p2", "pending", 0.01, 429)
    metrics.observe_call("p2", "pending", 31.0, None)  # a timeout: the +Inf bucket
    assert sample("mailbus_provider_rate_limited_total") == before_429 + 1
    assert sample("mailbus_provider_429_total") == before_deprecated + 1  # deprecated alias
    assert sample("mailbus_sends_total", priority="p2", outcome="pending") == before_pending + 2


def test_a_mails_metrics_look_their_labels_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``.labels()`` validates and locks on each call: the per-mail observations keep the
    children they looked up (docs/benchmarks/speed.md, issue 37)."""
    looked_up: list[tuple[str, ...]] = []
    original = metrics.MetricWrapperBase.labels

    def counting(self: metrics.MetricWrapperBase, *values: str) -> object:
        looked_up.append(values)
        return original(self, *values)

    monkeypatch.setattr(metrics.MetricWrapperBase, "labels", counting)
    for _ in range(3):  # the first round may look each child up once, if it is new
        metrics.observe_call("p1", "accepted", 0.05, 202)
        metrics.observe_accepted("p1", 0.2, None)
        metrics.observe_guarantee("exactly_once")
    looked_up.clear()
    metrics.observe_call("p1", "accepted", 0.05, 202)
    metrics.observe_accepted("p1", 0.2, None)
    metrics.observe_guarantee("exactly_once")
    assert looked_up == []


def test_latency_buckets_span_5ms_to_30s() -> None:
    text = generate_latest().decode()
    assert 'mailbus_provider_latency_seconds_bucket{le="0.005"}' in text
    assert 'mailbus_provider_latency_seconds_bucket{le="30.0"}' in text


def test_lookup_dead_letter_and_published() -> None:
    lookups = sample("mailbus_provider_requests_total", kind="lookup")
    rejected = sample("mailbus_dead_letters_total", reason="rejected")
    published = sample("mailbus_relay_published_total", priority="p0")
    metrics.observe_lookup()
    metrics.observe_dead_letter("rejected")
    metrics.observe_published("p0", 250)
    metrics.observe_published("p0", 0)
    assert sample("mailbus_provider_requests_total", kind="lookup") == lookups + 1
    assert sample("mailbus_dead_letters_total", reason="rejected") == rejected + 1
    assert sample("mailbus_relay_published_total", priority="p0") == published + 250


@pytest.mark.parametrize(("state", "value"), [("closed", 0), ("half_open", 1), ("open", 2)])
def test_breaker_state_gauge(state: str, value: int) -> None:
    metrics.set_breaker_state("sandbox", state)
    assert sample("mailbus_breaker_state", provider="sandbox") == value


def test_breaker_state_rejects_an_unknown_state() -> None:
    with pytest.raises(ValueError, match="half-open"):
        metrics.set_breaker_state("sandbox", "half-open")


def test_in_flight_gauges() -> None:
    metrics.set_in_flight("p0", 3, 16)
    assert sample("mailbus_in_flight", priority="p0") == 3
    assert sample("mailbus_in_flight_limit", priority="p0") == 16
    metrics.set_in_flight("p0", 0, 12)
    assert sample("mailbus_in_flight", priority="p0") == 0
    assert sample("mailbus_in_flight_limit", priority="p0") == 12


def test_librdkafka_stats_set_consumer_lag() -> None:
    """A statistics document captured from a confluent-kafka consumer: partition 1 is 15
    behind, 2 caught up, 0 has no known lag (-1), and -1 is librdkafka's internal one."""
    metrics.record_librdkafka_stats(STATS.read_text())
    lag = {
        labels: REGISTRY.get_sample_value(
            "mailbus_consumer_lag", {"topic": "mailbus.send.p1", "partition": labels}
        )
        for labels in ("-1", "0", "1", "2")
    }
    assert lag == {"-1": None, "0": None, "1": 15.0, "2": 0.0}


def test_a_partition_whose_lag_becomes_unknown_loses_its_sample() -> None:
    stats = json.loads(STATS.read_text())
    partitions = stats["topics"]["mailbus.send.p1"]["partitions"]
    partitions["0"]["consumer_lag"] = 7
    metrics.record_librdkafka_stats(json.dumps(stats))
    assert sample("mailbus_consumer_lag", topic="mailbus.send.p1", partition="0") == 7
    partitions["0"]["consumer_lag"] = -1  # revoked: no committed offset here any more
    metrics.record_librdkafka_stats(json.dumps(stats))
    assert (
        REGISTRY.get_sample_value(
            "mailbus_consumer_lag", {"topic": "mailbus.send.p1", "partition": "0"}
        )
        is None
    )


@pytest.mark.parametrize("document", ["", "not json", "[]", '{"topics": {"t": 3}}'])
def test_unreadable_stats_are_ignored(document: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics.record_librdkafka_stats(document)  # never raises inside a librdkafka callback
    assert "ignoring unreadable librdkafka statistics" in caplog.text


def test_only_this_module_imports_prometheus_client() -> None:
    root = Path(__file__).resolve().parents[2]
    importers = {
        path.relative_to(root).as_posix()
        for package in ("mailbus", "consumer", "relay", "schemas", "sandbox", "feedback", "intake")
        for path in (root / package).rglob("*.py")
        if "prometheus_client" in path.read_text()
    }
    assert importers <= {"mailbus/kernel/metrics.py"}
