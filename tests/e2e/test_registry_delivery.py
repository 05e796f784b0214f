"""Relay -> consumer with MAILBUS_SCHEMA_REGISTRY_URL set: Confluent-framed pointers, each
row accepted once (needs the stack's schema registry, as test_schema_registry.py does)."""

from __future__ import annotations

import os

import httpx
import pytest
from e2e_stack import Stack
from kafka_reader import read_messages

URL = os.environ.get("MAILBUS_TEST_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7")


def test_every_row_is_accepted_once_through_the_registry(stack: Stack) -> None:
    try:
        httpx.get(f"{URL}/subjects", timeout=3).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"no schema registry at {URL} ({type(exc).__name__}): run `make stack-up`")
    keys = stack.seed(40, priority="p1")
    stack.start_relay(MAILBUS_SCHEMA_REGISTRY_URL=URL)
    stack.start_consumer(MAILBUS_SCHEMA_REGISTRY_URL=URL)
    assert stack.wait_settled(90) == {"accepted": 40}
    ledger = stack.ledger()["keys"]
    assert all(ledger[key]["accepted"] == 1 for key in keys)
    landed = read_messages(stack.settings.kafka_bootstrap, [stack.settings.topic("p1")], 40, 30)
    assert len(landed) == 40
    assert all(message.value and message.value[0] == 0 for message in landed)  # Confluent
    assert stack.terminate("consumer") == 0
    stack.assert_table_agrees_with_providers()
