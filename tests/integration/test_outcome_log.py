"""One structured INFO line per recorded outcome (issue 22, item 8): the real
DeliveryService on the real ledger, its lines as the processes write them (JSON on stderr)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Iterator

import psycopg
import pytest
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.ledger import SendLedger
from mailbus.kernel.logs import configure_logging

REPLIES = {"ok-1": ProviderReply(200, "msg-ok-1"), "bad-1": ProviderReply(422)}


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """What a process writes to stderr (configure_logging) during one test."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", stream)
        configure_logging("INFO")
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


def test_each_recorded_outcome_is_one_json_line_with_its_fields(
    database_url: str, json_logs: io.StringIO
) -> None:
    keys = ["ok-1", "bad-1", "later-1"]
    with psycopg.connect(database_url) as conn:
        ids = {
            key: conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority)"
                " VALUES (%s, 'ana.smith@example.com', 't', 'p0') RETURNING id",
                (key,),
            ).fetchone()[0]  # type: ignore[index]
            for key in keys
        }
    provider = ScriptedProvider(reply=lambda key: REPLIES.get(key, ProviderReply(503)))

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(ledger, provider, RetryPolicy(5, 1.0, 10.0))
            for key in keys:
                await service.handle(origin_for(ids[key], key, 0, "p0"))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    outcomes = {line["dedupe_key"]: line for line in lines if line["msg"] == "outcome"}
    assert sorted(outcomes) == sorted(keys)  # one line each
    for key, line in outcomes.items():
        assert line["level"] == "info" and line["logger"] == "mailbus.consumer.outcome"
        assert (line["send_id"], line["priority"], line["attempt"]) == (ids[key], "p0", 1)
        assert line["provider"] == "default"
        assert isinstance(line["latency_ms"], int | float) and line["latency_ms"] >= 0
        assert "ana.smith" not in json.dumps(line)
    assert (outcomes["ok-1"]["status"], outcomes["ok-1"]["message_id"]) == ("accepted", "msg-ok-1")
    assert outcomes["ok-1"]["status_code"] == 200
    assert (outcomes["bad-1"]["status"], outcomes["bad-1"]["status_code"]) == ("failed", 422)
    assert outcomes["bad-1"]["message_id"] is None and outcomes["bad-1"]["reason"]
    assert (outcomes["later-1"]["status"], outcomes["later-1"]["status_code"]) == ("pending", 503)
    with psycopg.connect(database_url) as conn:  # the lines say what the table says
        table = dict(conn.execute("SELECT dedupe_key, status FROM email_sends").fetchall())
    assert {key: line["status"] for key, line in outcomes.items()} == table
