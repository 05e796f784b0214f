"""MAILBUS_PROVIDER switched (postmark → resend) against real PostgreSQL: a row records the
kind of the provider its first claim went to (``provider_kind``, migration 0071), as a
fallback's route does its own, so a mail one primary may have accepted is never looked up,
claimed or sent at another (docs/providers.md#switching-providers)."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from delivery_support import ScriptedProvider, origin_for, reconcile_then_deliver, service_for

from mailbus.consumer import send_admin
from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.outcome import ProviderReply, TransportFailure
from mailbus.consumer.ledger import SendLedger


def insert(database_url: str, key: str) -> int:
    with psycopg.connect(database_url) as conn:
        (send_id,) = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES (%s, 'ops@example.com', 'order_confirmation') RETURNING id",
            (key,),
        ).fetchone() or (0,)
    return int(send_id)


def test_a_mail_in_doubt_at_one_primary_is_never_sent_through_another(database_url: str) -> None:
    """A mail in doubt at a Postmark primary, and the consumers restarted with
    MAILBUS_PROVIDER=resend: Resend cannot know a mail Postmark may have taken, so the new
    primary never looks it up or sends it; it waits, ``unknown``, for a consumer with the
    provider that took it (or an operator)."""
    send_id = insert(database_url, "order-doubt")
    postmark = ScriptedProvider(reply=lambda _key: TransportFailure(True, "read timeout"))
    resend = ScriptedProvider()  # finds nothing: the mail never reached it

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            before = service_for(ledger, postmark, RetryPolicy(), provider_kind="postmark")
            await before.handle(origin_for(send_id, "order-doubt", 0))
            with psycopg.connect(database_url) as conn:  # in doubt since a day ago
                conn.execute(
                    "UPDATE email_sends SET status = 'unknown', next_try_at = now(),"
                    " in_doubt_since = now() - interval '1 day'"
                )
            after = service_for(ledger, resend, RetryPolicy(), provider_kind="resend")
            await reconcile_then_deliver(ledger, after, send_id, "order-doubt")
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert (postmark.sent, resend.sent, resend.looked_up) == (["order-doubt"], [], [])
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT status, provider, provider_kind, last_error FROM email_sends"
        ).fetchall() == [
            (
                "unknown",
                None,
                "postmark",
                "look-up failed, outcome unknown: the postmark provider is not configured here",
            )
        ]


def test_a_retry_of_another_primarys_mail_waits_until_an_operator_says_not_sent(
    database_url: str,
) -> None:
    """A mail Postmark refused with a 503 is retried only by a Postmark consumer: a Resend
    one leaves it ``pending`` with the reason. Once an operator resolves it ``--not-sent``
    (no provider took it), the primary configured now sends it."""
    send_id = insert(database_url, "order-retry")
    postmark = ScriptedProvider()  # 503
    resend = ScriptedProvider(reply=lambda _key: ProviderReply(200, message_id="re-1"))

    async def handle_as_resend(ledger: SendLedger) -> None:
        fresh = await ledger.load(send_id)
        assert fresh is not None
        after = service_for(ledger, resend, RetryPolicy(), provider_kind="resend")
        await after.handle(origin_for(send_id, "order-retry", fresh.view.attempts))

    async def scenario() -> tuple[str, str]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            before = service_for(ledger, postmark, RetryPolicy(), provider_kind="postmark")
            await before.handle(origin_for(send_id, "order-retry", 0))
            with psycopg.connect(database_url) as conn:  # due now
                conn.execute("UPDATE email_sends SET next_try_at = now()")
            await handle_as_resend(ledger)
            with psycopg.connect(database_url) as conn:  # then as a Postmark timeout leaves it
                waiting = conn.execute(
                    "SELECT status, last_error FROM email_sends WHERE id = %s", (send_id,)
                ).fetchone()
                conn.execute("UPDATE email_sends SET status = 'unknown', next_try_at = now()")
            assert send_admin.change(database_url, "order-retry", "not_sent", "ops")
            await handle_as_resend(ledger)
            assert waiting is not None
            return waiting
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == (
        "pending",
        "tried at the postmark provider, which this process cannot call",
    )
    assert (postmark.sent, resend.sent) == (["order-retry"], ["order-retry"])
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT status, provider_kind, message_id FROM email_sends"
        ).fetchall() == [("accepted", "resend", "re-1")]


def test_the_claim_records_the_first_kind_and_refuses_a_retry_for_another(
    database_url: str,
) -> None:
    """The first claim records its provider's kind; a retry claimed for another kind is
    refused by the database whatever the consumer decided; a row claimed before the kind
    was recorded (NULL) is claimed by any, which then records its own."""
    first, legacy = insert(database_url, "first"), insert(database_url, "legacy")
    with psycopg.connect(database_url) as conn:  # a row tried before migration 0071
        conn.execute(
            "UPDATE email_sends SET attempts = 1, first_tried_at = now() WHERE id = %s", (legacy,)
        )

    async def scenario() -> list[bool]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()

        async def claim(send_id: int, attempt: int, kind: str) -> bool:
            token = uuid.uuid4()
            claimed = await ledger.claim_for_send(send_id, attempt, None, token, provider_kind=kind)
            if claimed is not None:
                await ledger.release_claim(send_id, token)  # pending again, at its attempt
            return claimed is not None

        try:
            return [
                await claim(first, 0, "postmark"),
                await claim(first, 0, "resend"),  # handed back: a retry, at another kind
                await claim(first, 0, "postmark"),
                await claim(legacy, 1, "resend"),
                await claim(legacy, 1, "postmark"),
            ]
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) == [True, False, True, True, False]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT provider_kind FROM email_sends ORDER BY id").fetchall() == [
            ("postmark",),
            ("resend",),
        ]
