"""The Confluent wire format through a real schema registry (Apicurio on the local stack).

Needs the registry started by ``stack/local-stack.sh registry-start`` (``make stack-up``
starts it) at ``MAILBUS_TEST_SCHEMA_REGISTRY_URL`` or http://127.0.0.1:8081/apis/ccompat/v7.
"""

from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka_reader import read_messages
from relay_runner import relay_thread, wait_until
from test_relay import published, seed

from mailbus.intake.events import EventReader, NewRow, Rejected, Waiting
from mailbus.intake.mappings import load_mappings
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings
from mailbus.schemas.codec import shipped_schema
from mailbus.schemas.registry import (
    RegistryWriters,
    pointer_codec,
    register,
    register_shipped,
    registry_client,
    send_event_value_codec,
    subject,
    value_codec,
)
from mailbus_client.policies import configured_policy_book

URL = os.environ.get("MAILBUS_TEST_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7")


@pytest.fixture(scope="module")
def registry_url() -> str:
    try:
        httpx.get(f"{URL}/subjects", timeout=3).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(
            f"no schema registry at {URL} ({type(exc).__name__}); start it with "
            "`stack/local-stack.sh registry-start` (make stack-up does)"
        )
    return URL


@pytest.fixture
def registry_settings(settings: Settings, registry_url: str) -> Settings:
    return replace(settings, schema_registry_url=registry_url)


def test_pointers_go_through_the_relay_in_confluent_framing(registry_settings: Settings) -> None:
    seed(registry_settings.database_url, 12)
    with relay_thread(registry_settings):
        wait_until(lambda: published(registry_settings.database_url) == 12, 60, "12 published")
    topics = [registry_settings.topic(p) for p in ("p0", "p1", "p2")]
    landed = read_messages(registry_settings.kafka_bootstrap, topics, 12, timeout=30)
    codec = pointer_codec(registry_settings)  # what the consumer decodes with
    keys = sorted(codec.decode(message.value)["dedupe_key"] for message in landed)
    assert keys == sorted(f"k-{n}" for n in range(1, 13))
    assert all(message.value and message.value[0] == 0 for message in landed)
    client = registry_client(URL)
    for topic in topics:
        assert client.get_latest_version(subject(topic)).schema.schema_str is not None
        assert client.get_compatibility(subject(topic)) == "BACKWARD"


def test_outcome_events_go_through_the_relay_in_confluent_framing(
    registry_settings: Settings,
) -> None:
    seed(registry_settings.database_url, 3)
    with psycopg.connect(registry_settings.database_url) as conn:
        conn.execute("UPDATE email_sends SET status = 'failed', last_error = 'rejected'")
    with relay_thread(registry_settings):
        wait_until(lambda: unpublished_events(registry_settings.database_url) == 0, 60, "sent")
    topic = registry_settings.events_topic
    landed = read_messages(registry_settings.kafka_bootstrap, [topic], 3, timeout=30)
    codec = send_event_value_codec(registry_settings)  # what a domain service decodes with
    decoded = sorted((codec.decode(m.value)["dedupe_key"], m.value[:1]) for m in landed)
    assert decoded == [(f"k-{n}", b"\x00") for n in (1, 2, 3)]
    assert registry_client(URL).get_compatibility(subject(topic)) == "BACKWARD"


def unpublished_events(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM email_send_events WHERE published_at IS NULL"
        ).fetchone()
    return -1 if row is None else int(row[0])


def test_order_placed_from_a_plain_avro_serializer_is_read(registry_settings: Settings) -> None:
    topic = f"{registry_settings.topic_prefix}.orders.events"
    other_team = SchemaRegistryClient({"url": URL})  # not ours: a plain client
    serializer = AvroSerializer(other_team, shipped_schema("order_placed.avsc"))
    event = {
        "event_id": "e-1",
        "order_id": "o-1",
        "customer_email": "ada@example.com",
        "occurred_at": datetime(2026, 12, 1, tzinfo=UTC),
    }
    schema = json.loads(shipped_schema("order_placed.avsc"))
    for field in schema["fields"]:  # fill the optional rest with their defaults
        event.setdefault(field["name"], field.get("default"))
    value = serializer(event, SerializationContext(topic, MessageField.VALUE))
    other_team.__exit__()
    assert value is not None and value[0] == 0
    decoded = value_codec(registry_settings, "order_placed.avsc", [topic]).decode(value)
    assert decoded["customer_email"] == "ada@example.com"
    reader = EventReader(
        load_mappings(None), configured_policy_book(), RegistryWriters(registry_client(URL))
    )
    row = reader.read(value)  # what the intake does with it
    assert isinstance(row, NewRow), row
    assert (row.dedupe_key, row.to_address) == ("order-o-1-confirmation", "ada@example.com")
    assert isinstance(reader.read(value[:5] + b"\xff"), Rejected)
    # An id the registry does not know (yet) waits: a newer schema, not bad bytes.
    assert isinstance(reader.read(b"\x00\x7f\xff\xff\xff\x00"), Waiting)


def test_an_incompatible_schema_change_is_refused(registry_settings: Settings) -> None:
    topic = f"{registry_settings.topic_prefix}.orders.events"
    url = registry_settings.schema_registry_url
    assert url is not None
    text = shipped_schema("order_placed.avsc")
    register(registry_client(url), text, topic)
    changed = json.loads(text)
    changed["fields"].append({"name": f"required_{uuid.uuid4().hex[:6]}", "type": "string"})
    with pytest.raises(ConfigError, match="409"):  # old events lack it: not BACKWARD
        register(registry_client(url), json.dumps(changed), topic)
    versions = registry_client(url).get_versions(subject(topic))
    assert versions == [1]


def test_migrate_registers_the_shipped_schemas(registry_settings: Settings) -> None:
    settings = registry_settings
    intake_topic = f"{settings.topic_prefix}.orders"
    done = register_shipped(settings, intake_topic)
    assert len(done) == 6  # three pointer topics, the DLQ, outcome events, the intake
    client = registry_client(URL)
    for topic in (settings.topic("p2"), settings.dlq_topic, settings.events_topic, intake_topic):
        assert client.get_compatibility(subject(topic)) == "BACKWARD"
        assert f"{subject(topic)}=" in " ".join(done)


def test_processes_starting_together_all_register_the_same_schema(
    registry_settings: Settings,
) -> None:
    """The relay and consumers start at once and register the same subjects: the registry
    answers the losers of the compatibility-rule race 409 'already exists' (Apicurio), which
    must not stop a process (it stopped the consumer of a fresh CI run)."""
    url = registry_settings.schema_registry_url
    assert url is not None
    text = shipped_schema("send_pointer.avsc")
    for attempt in range(5):
        topic = f"{registry_settings.topic_prefix}.race{attempt}"
        topics = [topic] * 6
        with ThreadPoolExecutor(max_workers=6) as pool:
            ids = list(pool.map(lambda t: register(registry_client(url), text, t), topics))
        assert len(set(ids)) == 1
        assert registry_client(url).get_compatibility(subject(topic)) == "BACKWARD"
