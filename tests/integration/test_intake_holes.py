"""The intake runs on whatever an event holds (issue 18): under its own role, past events
too large to republish or to store, and past an empty order id; each bad event becomes a
dead letter and the events behind it become rows."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka_reader import read_messages
from tcp_proxy import TcpProxy
from test_intake import (
    _STARTUP_S,
    Intake,
    _committed,
    _free_port,
    _order,
    _produce,
    _topic,
    _wait_until_committed,
    intake_env,
    start_intake,
)
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.kernel.settings import Settings
from mailbus.schemas.codec import AvroCodec, shipped_schema
from mailbus.schemas.registry import RegistryCodec, registry_client

pytestmark = pytest.mark.stack
__all__ = ["intake_env", "start_intake"]  # fixtures shared with test_intake

REGISTRY = os.environ.get(
    "MAILBUS_TEST_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7"
)


def _query(database_url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql).fetchall()


def _wait_for(
    database_url: str, sql: str, expected: object, intake: Intake, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while (found := _query(database_url, sql)) != expected:
        assert intake.process.poll() is None, f"intake exited:\n{intake.output()}"
        assert time.monotonic() < deadline, f"{found} != {expected}:\n{intake.output()[-3000:]}"
        time.sleep(0.2)


_KEYS = "SELECT dedupe_key FROM email_sends ORDER BY 1"
_LETTERS = "SELECT reason, original_key FROM email_dead_letters ORDER BY original_offset"


def test_the_intake_under_its_own_role_sets_a_bad_event_aside(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    apply_roles(settings.database_url)
    topic = _topic(intake_env)
    records = [(b"G1", _order("G1", "e1")), (b"J", b"\x00junk"), (b"G2", _order("G2", "e2"))]
    _produce(settings.kafka_bootstrap, topic, records)
    with login_as(settings.database_url, "mailbus_intake") as url:
        intake = start_intake(MAILBUS_DATABASE_URL=url)
        _wait_for(
            settings.database_url,
            _KEYS,
            [("order-G1-confirmation",), ("order-G2-confirmation",)],
            intake,
            _STARTUP_S,
        )
        _wait_until_committed(settings, topic)
        assert intake.stop() == 0, intake.output()
    assert _query(settings.database_url, _LETTERS) == [("intake_undecodable", b"J")]
    assert "permission denied" not in intake.output()


def test_an_empty_order_id_is_refused_with_a_dead_letter(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    records = [(b"E", _order("", "e0", email="empty@example.com")), (b"G", _order("G", "e1"))]
    _produce(settings.kafka_bootstrap, topic, records)
    intake = start_intake()
    _wait_for(settings.database_url, _KEYS, [("order-G-confirmation",)], intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    assert _query(settings.database_url, _LETTERS) == [("intake_invalid", b"E")]
    [(error,)] = _query(settings.database_url, "SELECT error FROM email_dead_letters")
    assert "order_id" in str(error)


def _produce_big(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Like ``_produce``, up to the broker's default limit (1,048,588 bytes a record)."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1_048_576})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_a_one_megabyte_event_is_set_aside_cut_and_the_next_becomes_a_row(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    topic = _topic(intake_env)
    huge = b"\x00" + b"j" * 1_000_000  # near the broker's limit: +headers is over it
    _produce_big(settings.kafka_bootstrap, topic, [(b"H", huge), (b"G", _order("G", "e1"))])
    intake = start_intake()
    _wait_for(settings.database_url, _KEYS, [("order-G-confirmation",)], intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    [(reason, value)] = _query(
        settings.database_url, "SELECT reason, original_value FROM email_dead_letters"
    )
    assert (reason, bytes(value)) == ("intake_undecodable", huge)  # the table keeps it whole
    [letter] = read_messages(settings.kafka_bootstrap, [settings.intake_dlq_topic], 1, 30)
    headers = dict(letter.headers)
    assert letter.value == huge[: 64 * 1024]
    assert headers["mailbus.dlq.truncated"] == (
        b"value of 1000001 bytes cut to 65536; 0 original headers dropped"
    )


def test_a_row_postgresql_refuses_is_found_and_set_aside(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE email_sends ADD CONSTRAINT refused_by_the_test"
            " CHECK (dedupe_key <> 'order-R-confirmation')"
        )
    topic = _topic(intake_env)
    orders = ["A", "B", "R", "C", "D"]
    _produce(settings.kafka_bootstrap, topic, [(o.encode(), _order(o, o)) for o in orders])
    intake = start_intake()
    expected = [(f"order-{o}-confirmation",) for o in orders if o != "R"]
    _wait_for(settings.database_url, _KEYS, expected, intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    [(reason, key, error)] = _query(
        settings.database_url, "SELECT reason, original_key, error FROM email_dead_letters"
    )
    assert (reason, key) == ("intake_invalid", b"R")
    assert "CheckViolation (23514)" in str(error) and "buyer-R" not in str(error)


def test_a_nested_nul_is_refused_with_a_dead_letter(
    settings: Settings,
    intake_env: dict[str, str],
    start_intake: Callable[..., Intake],
    tmp_path: Path,
) -> None:
    schema = {
        "type": "record",
        "name": "Basket",
        "fields": [
            {"name": "basket_id", "type": "string"},
            {"name": "email", "type": "string"},
            {"name": "lines", "type": {"type": "map", "values": "string"}},
        ],
    }
    (tmp_path / "basket.avsc").write_text(json.dumps(schema))
    mapping = {
        "event": "Basket",
        "schema": "basket.avsc",
        "template": "basket",
        "dedupe_key": "basket-{basket_id}",
        "to": "email",
        "priority": "p2",
        "expire_after_s": 3600,
    }
    (tmp_path / "mappings.json").write_text(json.dumps({"mappings": [mapping]}))
    codec = AvroCodec(json.dumps(schema))

    def basket(basket_id: str, line: str) -> bytes:
        return codec.encode(
            {"basket_id": basket_id, "email": "a@example.com", "lines": {"1": line}}
        )

    topic = _topic(intake_env)
    records = [(b"N", basket("N", "tea\x00")), (b"G", basket("G", "tea"))]
    _produce(settings.kafka_bootstrap, topic, records)
    intake = start_intake(MAILBUS_INTAKE_MAPPINGS=str(tmp_path / "mappings.json"))
    _wait_for(settings.database_url, _KEYS, [("basket-G",)], intake, _STARTUP_S)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    assert _query(settings.database_url, _LETTERS) == [("intake_invalid", b"N")]


def test_a_thousand_bad_events_too_large_for_the_dlq_do_not_hold_up_the_rows_behind(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    limit = ConfigEntry("max.message.bytes", "20000", incremental_operation=AlterConfigOpType.SET)
    dlq = ConfigResource(ResourceType.TOPIC, settings.intake_dlq_topic, incremental_configs=[limit])
    for future in admin.incremental_alter_configs([dlq]).values():
        future.result(30)  # every letter below is too large for the intake DLQ
    topic = _topic(intake_env)
    bad = [(b"B%d" % n, b"\x00" + bytes([n % 251]) * 30_000) for n in range(1000)]
    good = [(b"G%d" % n, _order(f"G{n}", f"e{n}")) for n in range(3)]
    _produce(settings.kafka_bootstrap, topic, bad + good)
    intake = start_intake()
    expected = sorted((f"order-G{n}-confirmation",) for n in range(3))
    _wait_for(settings.database_url, _KEYS, expected, intake, 120)
    _wait_until_committed(settings, topic)
    assert intake.stop() == 0, intake.output()
    [(count, size)] = _query(
        settings.database_url,
        "SELECT count(*), min(length(original_value)) FROM email_dead_letters",
    )
    assert (count, size) == (1000, 30_001)
    letters = read_messages(settings.kafka_bootstrap, [settings.intake_dlq_topic], 1000, 60)
    assert len(letters) >= 1000 and all(letter.value is None for letter in letters)


def test_an_event_older_than_the_maximum_age_is_recorded_not_mailed(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    now_ms = int(time.time() * 1000)
    old, new = now_ms - 30 * 24 * 3600 * 1000, now_ms
    topic = _topic(intake_env)
    records = [
        (b"O", _order("O", "e1", occurred_at=old)),
        (b"N", _order("N", "e2", occurred_at=new)),
    ]
    _produce(settings.kafka_bootstrap, topic, records)
    port = _free_port()
    intake = start_intake(MAILBUS_METRICS_PORT=str(port))  # MAILBUS_INTAKE_MAX_AGE: 3d
    _wait_for(
        settings.database_url,
        _KEYS,
        [("order-N-confirmation",), ("order-O-confirmation",)],
        intake,
        _STARTUP_S,
    )
    _wait_until_committed(settings, topic)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert intake.stop() == 0, intake.output()
    assert 'mailbus_intake_events_total{outcome="too_old"} 1.0' in metrics
    rows = _query(
        settings.database_url,
        "SELECT dedupe_key, status, last_error IS NOT NULL,"
        " round(extract(epoch FROM expires_at) * 1000) FROM email_sends ORDER BY 1",
    )
    assert rows == [
        ("order-N-confirmation", "pending", False, None),  # order mail never expires
        ("order-O-confirmation", "expired", True, old + 3 * 24 * 3600 * 1000),
    ]


def test_valid_events_wait_while_the_schema_registry_is_away(
    settings: Settings, intake_env: dict[str, str], start_intake: Callable[..., Intake]
) -> None:
    try:
        httpx.get(f"{REGISTRY}/subjects", timeout=3).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"no schema registry at {REGISTRY} ({type(exc).__name__}): make stack-up")
    topic = _topic(intake_env)
    codec = RegistryCodec(registry_client(REGISTRY), shipped_schema("order_placed.avsc"), [topic])
    now_ms = int(time.time() * 1000)
    events = [
        {"event_id": f"e{n}", "order_id": f"R{n}", "customer_email": f"r{n}@example.com",
         "occurred_at": now_ms}
        for n in range(5)
    ]  # fmt: skip
    _produce(settings.kafka_bootstrap, topic, [(b"R", codec.encode(e)) for e in events])
    where = urlsplit(REGISTRY)
    proxy = TcpProxy(where.hostname or "127.0.0.1", where.port or 80)
    try:
        proxy.cut()  # the registry away for the intake only
        url = where._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()
        intake = start_intake(MAILBUS_SCHEMA_REGISTRY_URL=url)
        deadline = time.monotonic() + _STARTUP_S
        while intake.output().count("cannot decode events") < 3:
            assert intake.process.poll() is None and time.monotonic() < deadline, intake.output()
            time.sleep(0.2)
        assert _query(settings.database_url, "SELECT count(*) FROM email_dead_letters") == [(0,)]
        assert _query(settings.database_url, "SELECT count(*) FROM email_sends") == [(0,)]
        assert _committed(settings, topic, settings.partitions) == [-1001] * settings.partitions
        proxy.restore()
        expected = [(f"order-R{n}-confirmation",) for n in range(5)]
        _wait_for(settings.database_url, _KEYS, expected, intake, _STARTUP_S)
        _wait_until_committed(settings, topic)
        assert intake.stop() == 0, intake.output()
    finally:
        proxy.close()
    assert _query(settings.database_url, "SELECT count(*) FROM email_dead_letters") == [(0,)]
