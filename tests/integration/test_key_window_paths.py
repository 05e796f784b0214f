"""Windows that hold on every path (issue 34, review 2026-12-06 #4, #5, #19b), through the
real DeliveryService on a real ledger against a scripted provider whose idempotency key
expires: a 5xx leaves the row in doubt, so the window holds its retry; the window is
checked again after the wait for an in-flight slot; a resend the provider refuses as
holding the key already waits for an operator."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.capability import Capability, IdempotencyKey
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.service import DeliveryService

WINDOW_S = 10.0
POLICY = RetryPolicy(max_attempts=5, base_s=0.2, cap_s=5.0, late_accept_s=0.0)


def keyed(reply: Callable[[str], Any]) -> ScriptedProvider:
    provider = ScriptedProvider(reply=reply)
    provider.capability = Capability(IdempotencyKey("Idempotency-Key", WINDOW_S))  # type: ignore[misc]
    return provider


def insert(database_url: str, key: str, doubt_sql: str = "") -> int:
    """A row; ``doubt_sql``: SET clauses that put it in doubt after an earlier call."""
    with psycopg.connect(database_url) as conn:
        (row_id,) = conn.execute(  # type: ignore[misc]
            "INSERT INTO email_sends (dedupe_key, to_address, template) VALUES (%s, %s, 't')"
            " RETURNING id",
            (key, f"{key}@example.com"),
        ).fetchone()
        if doubt_sql:
            conn.execute(f"UPDATE email_sends SET {doubt_sql} WHERE id = %s", (row_id,))
    return int(row_id)


def row_of(database_url: str, row_id: int) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(  # type: ignore[return-value]
            "SELECT status, attempts, in_doubt_since IS NOT NULL, last_error,"
            " extract(epoch FROM next_try_at - first_tried_at)::float8"
            " FROM email_sends WHERE id = %s",
            (row_id,),
        ).fetchone()


def run(
    database_url: str,
    provider: ScriptedProvider,
    scenario: Callable[[DeliveryService], Awaitable[None]],
) -> None:
    async def main() -> None:
        ledger = SendLedger(database_url, max_connections=4, lease_s=30)
        await ledger.open()
        try:
            await scenario(service_for(ledger, provider, POLICY))
        finally:
            await ledger.close()

    asyncio.run(main())


def test_a_retry_after_a_5xx_is_held_to_the_keys_window(database_url: str) -> None:
    """Review #4: a 500 under an expiring key may follow acceptance. The row is in doubt,
    so once its key's window has passed it is never sent again: ``unknown``."""
    provider = keyed(lambda key: ProviderReply(500, error_excerpt="internal_server_error"))
    row_id = insert(database_url, "five-hundred")

    async def first(service: DeliveryService) -> None:
        await service.handle(origin_for(row_id, "five-hundred", 0))

    run(database_url, provider, first)
    status, attempts, in_doubt, _, _ = row_of(database_url, row_id)
    assert (status, attempts, in_doubt) == ("pending", 1, True)  # resent only in the window
    with psycopg.connect(database_url) as conn:  # the retry schedule takes it past the window
        conn.execute(
            "UPDATE email_sends SET first_tried_at = now() - make_interval(secs => %s),"
            " next_try_at = NULL WHERE id = %s",
            (WINDOW_S + 1, row_id),
        )

    async def retry(service: DeliveryService) -> None:
        await service.handle(origin_for(row_id, "five-hundred", 1))

    run(database_url, provider, retry)
    assert provider.sent == ["five-hundred"]  # the one call; the retry was refused
    status, attempts, _, error, _ = row_of(database_url, row_id)
    assert (status, attempts) == ("unknown", 1)
    assert "window" in error and "operator" in error


def test_the_window_is_checked_again_after_the_wait_for_a_slot(database_url: str) -> None:
    """Review #5: a row in doubt claimed 0.4 s before its window ends waits 0.6 s for an
    in-flight slot; it is not sent then, but left ``unknown``."""
    provider = keyed(lambda key: ProviderReply(200, f"msg-{key}"))
    left_s = 0.4
    row_id = insert(
        database_url,
        "slot-wait",
        "attempts = 1, in_doubt_since = now() - interval '10 seconds',"
        f" first_tried_at = now() - make_interval(secs => {WINDOW_S - left_s})",
    )

    async def scenario(service: DeliveryService) -> None:
        slots = service.gate.slots
        held = 0
        while await slots.acquire(timeout=0):
            held += 1
        handling = asyncio.create_task(service.handle(origin_for(row_id, "slot-wait", 1)))
        await asyncio.sleep(left_s + 0.2)
        for _ in range(held):
            slots.release()
        await handling

    run(database_url, provider, scenario)
    assert provider.sent == []
    status, attempts, _, error, _ = row_of(database_url, row_id)
    assert (status, attempts) == ("unknown", 1)
    assert "window" in error


def test_a_resend_refused_as_holding_the_key_waits_for_an_operator(database_url: str) -> None:
    """Review #19b: Resend's 409 ``invalid_idempotent_request`` on a resend of a row in
    doubt proves an earlier call reached it. The row is ``unknown`` and not taken again
    while the key's window lasts: no attempt after the one that said so."""
    conflict = "invalid_idempotent_request: key already used with a different payload"
    provider = keyed(lambda key: ProviderReply(409, error_excerpt=conflict))
    row_id = insert(
        database_url,
        "changed-body",
        "attempts = 1, in_doubt_since = now(), first_tried_at = now()",
    )

    async def scenario(service: DeliveryService) -> None:
        await service.handle(origin_for(row_id, "changed-body", 1))
        assert await service.ledger.take_unresolved(["p1"], 10) == []  # not due: no resend

    run(database_url, provider, scenario)
    assert provider.sent == ["changed-body"]
    status, attempts, _, error, retry_in = row_of(database_url, row_id)
    assert (status, attempts) == ("unknown", 2)
    assert "operator" in error
    assert abs(retry_in - WINDOW_S) < 1  # taken again only when its window has ended


def test_a_resend_after_not_sent_refused_as_holding_the_key_is_not_failed(
    database_url: str,
) -> None:
    """After ``send resolve --not-sent`` (``in_doubt_since`` cleared, ``at_least_once``) the
    provider's 409 ``invalid_idempotent_request`` still proves an earlier call reached it:
    the row waits for an operator, never ``failed`` with a dead letter and no look-up."""
    conflict = "invalid_idempotent_request: key already used with a different payload"
    provider = keyed(lambda key: ProviderReply(409, error_excerpt=conflict))
    row_id = insert(
        database_url,
        "not-sent-held",
        "attempts = 1, first_tried_at = now(), guarantee = 'at_least_once'",
    )

    async def scenario(service: DeliveryService) -> None:
        await service.handle(origin_for(row_id, "not-sent-held", 1))

    run(database_url, provider, scenario)
    assert provider.sent == ["not-sent-held"]
    status, attempts, _, error, _ = row_of(database_url, row_id)
    assert (status, attempts) == ("unknown", 2)
    assert "operator" in error
    with psycopg.connect(database_url) as conn:
        (letters,) = conn.execute(  # type: ignore[misc]
            "SELECT count(*) FROM email_dead_letters WHERE send_id = %s", (row_id,)
        ).fetchone()
    assert letters == 0
