"""A first attempt through the real DeliveryService and ledger: a pointer that says its row
was never claimed is gated on the pointer, then loaded and claimed by one statement; a
version 1 pointer, and a row read while a domain is paused, go the usual way; a mail found
unfit once read ends as it ends without the claim."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import fastavro
import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.core.smtp_outcome import SmtpReply
from mailbus.consumer.ledger import MessageOrigin, SendLedger
from mailbus.consumer.service import DeliveryService
from mailbus.schemas.codec import schema_fingerprint, shipped_schema

POLICY = RetryPolicy(max_attempts=5, base_s=1.0, cap_s=10.0)
FIELDS = (
    "SELECT status, attempts, first_tried_at, guarantee, provider, provider_kind, provider_key,"
    " lease_token, last_error FROM email_sends WHERE dedupe_key = %s"
)


def _insert(database_url: str, *mails: tuple[str, str]) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        return {
            key: conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, %s, 'welcome') RETURNING id",
                (key, address),
            ).fetchone()[0]  # type: ignore[index]
            for key, address in mails
        }


def _fields(database_url: str, key: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        found = conn.execute(FIELDS, (key,)).fetchone()
    assert found is not None
    return tuple(found)


def _v1_origin(send_id: int, key: str) -> MessageOrigin:
    """A pointer written by a relay of the version before (schemas/history)."""
    schema = fastavro.parse_schema(json.loads(shipped_schema("history/send_pointer.1.avsc")))
    body = io.BytesIO()
    body.write(b"\xc3\x01" + schema_fingerprint(schema))
    record = {
        "send_id": send_id,
        "dedupe_key": key,
        "priority": "p1",
        "attempt": 0,
        "enqueued_at": datetime.now(UTC),
    }
    fastavro.schemaless_writer(body, schema, record)
    return MessageOrigin("t.send.p1", 0, send_id, None, body.getvalue())


def _run(
    database_url: str,
    provider: ScriptedProvider,
    script: Callable[[DeliveryService, list[str]], Any],
) -> list[str]:
    """Run ``script`` on a service; the names of the statements it ran, in order."""
    statements: list[str] = []

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        run = ledger._run

        async def counted(query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
            statements.append(query)
            return await run(query, params)

        ledger._run = counted  # type: ignore[method-assign]
        await ledger.open()
        try:
            await script(service_for(ledger, provider, POLICY), statements)
        finally:
            await ledger.close()

    asyncio.run(scenario())
    return statements


def test_a_first_attempt_runs_one_statement_before_its_call_and_one_after(
    database_url: str,
) -> None:
    ids = _insert(database_url, ("new", "ana@example.com"), ("old", "bo@example.com"))
    provider = ScriptedProvider(reply=lambda key: ProviderReply(200, f"msg-{key}"))
    seen: dict[str, list[str]] = {}

    async def script(service: DeliveryService, statements: list[str]) -> None:
        await service.handle(origin_for(ids["new"], "new", 0, first_template="welcome"))
        seen["new"] = statements[:]
        statements.clear()
        await service.handle(_v1_origin(ids["old"], "old"))  # a rolling upgrade's pointer
        seen["old"] = statements[:]
        statements.clear()
        # the same pointer again: the row moved on, nothing is called or written
        await service.handle(origin_for(ids["new"], "new", 0, first_template="welcome"))
        seen["again"] = statements[:]

    _run(database_url, provider, script)
    assert seen["new"] == ["claim_first_attempt", "settle"]
    assert seen["old"] == ["load_sends", "claim_for_send", "settle"]
    assert seen["again"] == ["claim_first_attempt"]
    assert provider.sent == ["new", "old"]
    for key in ("new", "old"):
        status, attempts, tried_at, guarantee, route, kind, sent_key, lease, _ = _fields(
            database_url, key
        )
        assert (status, attempts, guarantee, route, kind, sent_key, lease) == (
            "accepted", 1, "exactly_once", None, "http", key, None
        )
        assert tried_at is not None


def test_a_mail_found_unfit_once_read_ends_as_it_does_without_the_claim(
    database_url: str,
) -> None:
    # An address that must never reach a provider, written by plain SQL: one mail claimed as
    # it is read, one through the usual path, which never claims it.
    ids = _insert(database_url, ("claimed", "not an address"), ("usual", "not an address"))
    provider = ScriptedProvider(reply=lambda key: ProviderReply(200, f"msg-{key}"))

    async def script(service: DeliveryService, statements: list[str]) -> None:
        await service.handle(origin_for(ids["claimed"], "claimed", 0, first_template="welcome"))
        assert statements == ["claim_first_attempt", "settle"]
        await service.handle(origin_for(ids["usual"], "usual", 0))

    _run(database_url, provider, script)
    assert provider.sent == []
    claimed, usual = _fields(database_url, "claimed"), _fields(database_url, "usual")
    assert claimed == usual
    assert claimed[:8] == ("failed", 0, None, None, None, None, None, None)
    with psycopg.connect(database_url) as conn:
        letters = conn.execute(
            "SELECT reason, attempts FROM email_dead_letters ORDER BY send_id"
        ).fetchall()
    assert letters == [("invalid", 0), ("invalid", 0)]


def test_while_a_domain_is_paused_a_row_is_read_before_it_is_claimed(database_url: str) -> None:
    # slow.example answers 421 and is paused; a later mail to it is deferred without a
    # claim, and every first attempt meanwhile is read first (its domain is in the row).
    ids = _insert(
        database_url,
        ("slow-1", "a@slow.example"),
        ("slow-2", "b@slow.example"),
        ("fast-1", "c@fast.example"),
    )

    def reply(key: str) -> SmtpReply | ProviderReply:
        if key.startswith("slow"):
            return SmtpReply(421, "4.7.0 Try again later", "rcpt")
        return ProviderReply(200, f"msg-{key}")

    provider = ScriptedProvider(reply=reply)  # type: ignore[arg-type]
    seen: dict[str, list[str]] = {}

    async def script(service: DeliveryService, statements: list[str]) -> None:
        for key in ("slow-1", "slow-2", "fast-1"):
            statements.clear()
            await service.handle(origin_for(ids[key], key, 0, first_template="welcome"))
            seen[key] = statements[:]

    _run(database_url, provider, script)
    assert seen["slow-1"] == ["claim_first_attempt", "settle"]  # no domain paused yet
    assert seen["slow-2"] == ["load_sends", "settle"]  # deferred, never claimed
    assert seen["fast-1"] == ["load_sends", "claim_for_send", "settle"]
    assert provider.sent == ["slow-1", "fast-1"]
    status, attempts, tried_at, *_ = _fields(database_url, "slow-2")
    assert (status, attempts, tried_at) == ("pending", 0, None)
