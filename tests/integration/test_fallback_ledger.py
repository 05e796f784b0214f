"""A named fallback provider against real PostgreSQL: the claim fixes a row's provider at
its first claim (consumer/queries.sql), so a mail the primary was offered is never claimed
for the fallback, even once its attempts were handed back or reset (a refusal about our
account, a claim handed back, a dead letter replayed); and the fallback's own delivery
events match the mail it sent (feedback/events.sql)."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import psycopg
from delivery_support import ScriptedProvider, origin_for, reconcile_then_deliver, service_for
from ledger_support import claim
from prometheus_client import REGISTRY

from mailbus.consumer import send_admin
from mailbus.consumer.core import RetryPolicy, classify
from mailbus.consumer.core.breaker import Breaker, BreakerState
from mailbus.consumer.core.outcome import ACCOUNT, ProviderReply, TransportFailure
from mailbus.consumer.core.smtp_outcome import SmtpReply
from mailbus.consumer.gate import Admission
from mailbus.consumer.ledger import SendLedger
from mailbus.feedback.events import DeliveryEvent
from mailbus.feedback.store import EventStore


def test_a_mail_claimed_by_one_provider_is_never_claimed_for_another(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, first_tried_at,"
                " in_doubt_since)"
                " VALUES ('replayed-after-doubt', 'a@example.com', 'internal_alert', now(), now()),"
                "        ('never-claimed', 'b@example.com', 'internal_alert', NULL, NULL)"
                " RETURNING id"
            ).fetchall()
        ]

    async def scenario() -> list[uuid.UUID | None]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            return [
                await claim(ledger, ids[0], 0, "fallback"),  # refused: the primary took it
                await claim(ledger, ids[1], 0, "fallback"),  # a first claim may go anywhere
            ]
        finally:
            await ledger.close()

    refused, claimed = asyncio.run(scenario())
    assert refused is None and claimed is not None
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT provider FROM email_sends ORDER BY id").fetchall() == [
            (None,),
            ("fallback",),
        ]


def test_a_named_fallbacks_events_match_the_mail_it_sent(database_url: str) -> None:
    """MAILBUS_FALLBACK_PROVIDER=postmark on the receiver: a Postmark event matches the
    fallback's send; the primary's sends (SendGrid) take only SendGrid's."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, provider,"
            " message_id) VALUES ('via-fallback', 'a@example.com', 't', 'accepted',"
            " 'fallback', 'pm-1'), ('via-primary', 'b@example.com', 't', 'accepted', NULL,"
            " 'sg-1')"
        )

    def delivered(n: int, message_id: str) -> DeliveryEvent:
        return DeliveryEvent(f"e-{n}", "delivered", message_id, datetime.now(UTC))

    async def scenario() -> list[bool]:
        store = EventStore(database_url, sent_through="sendgrid", fallback_through="postmark")
        await store.open()
        try:
            return [
                (await store.record("postmark", delivered(1, "pm-1"))).matched,
                (await store.record("postmark", delivered(2, "sg-1"))).matched,
                (await store.record("sendgrid", delivered(3, "pm-1"))).matched,
                (await store.record("sendgrid", delivered(4, "sg-1"))).matched,
            ]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [True, False, False, True]


def test_the_fallbacks_bad_address_answer_is_recorded_under_its_own_name(
    database_url: str,
) -> None:
    """A bad address the fallback (here SendGrid) rejects is suppressed with the source
    ``sync:sendgrid``, not the primary's; the row records the fallback as its provider."""
    with psycopg.connect(database_url) as conn:
        (send_id,) = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('alert-bad', 'nobody@example.com', 'internal_alert') RETURNING id"
        ).fetchone() or (0,)
    primary = ScriptedProvider()
    second = ScriptedProvider(reply=lambda _key: ProviderReply(400, bad_recipient=True))

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(
                ledger, primary, RetryPolicy(), fallback=second, fallback_kind="sendgrid"
            )
            service.gate.breaker = Breaker(BreakerState.OPEN, opened_at=time.monotonic())
            await service.handle(origin_for(send_id, "alert-bad", 0))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert (primary.sent, second.sent) == ([], ["alert-bad"])
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status, provider FROM email_sends").fetchall() == [
            ("failed", "fallback:sendgrid")
        ]
        assert conn.execute("SELECT source FROM email_suppressions").fetchall() == [
            ("sync:sendgrid",)
        ]


def test_a_mail_in_doubt_at_one_fallback_is_never_sent_through_another(database_url: str) -> None:
    """A mail in doubt at a SendGrid fallback, and the consumers restarted with
    MAILBUS_FALLBACK_PROVIDER=postmark: Postmark's look-up cannot know a mail SendGrid may
    have taken, so the new fallback never looks it up or sends it; it waits, ``unknown``,
    for a consumer with the provider that took it (or an operator)."""
    with psycopg.connect(database_url) as conn:
        (send_id,) = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('alert-doubt', 'ops@example.com', 'internal_alert') RETURNING id"
        ).fetchone() or (0,)
    sendgrid = ScriptedProvider(reply=lambda _key: TransportFailure(True, "read timeout"))
    postmark = ScriptedProvider()  # finds nothing: the mail never reached it

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            before = service_for(
                ledger,
                ScriptedProvider(),
                RetryPolicy(),
                fallback=sendgrid,
                fallback_kind="sendgrid",
            )
            before.gate.breaker = Breaker(BreakerState.OPEN, opened_at=time.monotonic())
            await before.handle(origin_for(send_id, "alert-doubt", 0))
            with psycopg.connect(database_url) as conn:  # as SendGrid (no look-up) leaves it
                conn.execute(
                    "UPDATE email_sends SET status = 'unknown', next_try_at = now(),"
                    " in_doubt_since = now() - interval '1 day'"
                )
            after = service_for(
                ledger,
                ScriptedProvider(),
                RetryPolicy(),
                fallback=postmark,
                fallback_kind="postmark",
            )
            await reconcile_then_deliver(ledger, after, send_id, "alert-doubt")
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert (sendgrid.sent, postmark.sent, postmark.looked_up) == (["alert-doubt"], [], [])
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status FROM email_sends").fetchall() == [("unknown",)]


def test_a_fallbacks_events_match_the_kind_its_mail_went_through(database_url: str) -> None:
    """A mail a SendGrid fallback sent (``fallback:sendgrid``), and a receiver whose
    MAILBUS_FALLBACK_PROVIDER now says postmark: SendGrid's event still matches it,
    Postmark's never does."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, provider,"
            " message_id) VALUES ('via-sendgrid', 'a@example.com', 't', 'accepted',"
            " 'fallback:sendgrid', 'sg-9')"
        )

    def delivered(n: int) -> DeliveryEvent:
        return DeliveryEvent(f"e-{n}", "delivered", "sg-9", datetime.now(UTC))

    async def scenario() -> list[bool]:
        store = EventStore(database_url, sent_through="ses", fallback_through="postmark")
        await store.open()
        try:
            return [
                (await store.record("postmark", delivered(1))).matched,
                (await store.record("sendgrid", delivered(2))).matched,
            ]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [False, True]


def test_a_fallback_that_refuses_our_key_opens_its_own_breaker(database_url: str) -> None:
    """A revoked key at the fallback (401 on every call) opens the fallback's breaker, as it
    would the primary's (item 1 of issue 34): the next mail waits at it instead of being
    sent again and again at the base backoff. The primary's breaker is left as it was."""
    keys = [f"alert-{n}" for n in range(7)]
    ids = _alerts(database_url, keys)
    primary = ScriptedProvider()
    second = ScriptedProvider(reply=lambda _key: ProviderReply(401, server_stage=ACCOUNT))

    async def scenario() -> tuple[BreakerState | None, BreakerState, bool]:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(ledger, primary, RetryPolicy(), fallback=second)
            # the primary down, its next probe a minute away (one due would take the mail)
            service.gate.breaker = Breaker(BreakerState.OPEN, 5, time.monotonic(), 60.0)
            for send_id, key in zip(ids[:-1], keys[:-1], strict=True):
                await service.handle(origin_for(send_id, key, 0))
            try:  # the breaker is open: the last mail waits at the fallback's gate
                await asyncio.wait_for(service.handle(origin_for(ids[-1], keys[-1], 0)), 1.0)
                waited = False
            except TimeoutError:
                waited = True
            own = getattr(service, "fallback_gate", None)  # None: no breaker of its own
            return (own and own.breaker.state), service.gate.breaker.state, waited
        finally:
            await ledger.close()

    def refusals(provider: str) -> float:
        labels = {"provider": provider, "stage": ACCOUNT}
        return REGISTRY.get_sample_value("mailbus_provider_server_failures_total", labels) or 0.0

    before = refusals("fallback:http"), refusals("http")
    fallback_state, primary_state, waited = asyncio.run(scenario())
    assert waited and keys[-1] not in second.sent, second.sent
    assert fallback_state is BreakerState.OPEN and primary_state is BreakerState.OPEN
    assert primary.sent == []
    # counted as the fallback's, so the alert names the fallback's key, not the primary's
    assert refusals("fallback:http") - before[0] == len(second.sent) > 0
    assert refusals("http") == before[1]


def test_a_first_call_waiting_at_the_fallbacks_breaker_goes_to_the_primary_once_it_recovers(
    database_url: str,
) -> None:
    """Both breakers open (the primary down, the fallback's key revoked): an alert waits at
    the fallback's breaker, claiming nothing. When the primary's closes again (another
    mail's probe got through), the alert -- never offered to anyone -- goes to the primary
    instead of waiting for the revoked fallback; and one whose fallback stays down while the
    primary's probe is due probes the primary."""
    ids = _alerts(database_url, ["alert-waiting", "alert-probing"])
    primary = ScriptedProvider(reply=lambda key: ProviderReply(200, f"msg-{key}"))
    second = ScriptedProvider(reply=lambda _key: ProviderReply(401, server_stage=ACCOUNT))

    def down(cool_down_s: float) -> Breaker:
        return Breaker(BreakerState.OPEN, 5, time.monotonic(), cool_down_s)

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(ledger, primary, RetryPolicy(), fallback=second)
            service.gate.breaker = down(60.0)
            service.fallback_gate.breaker = down(60.0)
            waiting = asyncio.create_task(service.handle(origin_for(ids[0], "alert-waiting", 0)))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # both down: it waits, claiming nothing
            service.gate.breaker = Breaker()  # the primary recovered
            await asyncio.wait_for(waiting, 2.0)
            service.gate.breaker = down(0.0)  # down again, its probe due at once
            await asyncio.wait_for(service.handle(origin_for(ids[1], "alert-probing", 0)), 2.0)
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert primary.sent == ["alert-waiting", "alert-probing"] and second.sent == []
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT status, provider FROM email_sends ORDER BY id").fetchall()
    assert rows == [("accepted", None), ("accepted", None)]


def test_a_look_up_at_the_fallback_waits_out_the_fallbacks_own_429_pause(
    database_url: str,
) -> None:
    """The fallback answered a 429 with Retry-After: 30 (its gate pauses), and a mail in
    doubt there comes up for its look-up: the look-up is a request to the fallback too, so
    it waits the pause out as a send would (ProviderGate.before_request), not asked at once."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, provider,"
            " provider_kind, attempts, first_tried_at, in_doubt_since, next_try_at)"
            " VALUES ('alert-doubt', 'ops@example.com', 'internal_alert', 'unknown',"
            " 'fallback:http', 'http', 1, now(), now() - interval '1 hour', now())"
        )
    second = ScriptedProvider(accepted={"alert-doubt": "msg-1"})

    async def scenario() -> bool:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(ledger, ScriptedProvider(), RetryPolicy(), fallback=second)
            throttled = classify(ProviderReply(429, retry_after_s=30.0))
            service.fallback_gate.settle(Admission(), throttled, 0.1)
            ((loaded, token),) = await ledger.take_unresolved(["p1"], 10)
            try:
                await asyncio.wait_for(service.resolve(loaded, token), 1.0)
                return False
            except TimeoutError:
                return True
        finally:
            await ledger.close()

    assert asyncio.run(scenario()) and second.looked_up == []


def test_a_domain_the_fallback_says_is_throttling_waits_for_the_fallback(
    database_url: str,
) -> None:
    """The fallback (SMTP) answers 421 for slow.example: its next alert there waits, pending
    with no attempt spent, as it would at the primary; the fallback is not called again for
    that domain while its pause lasts."""
    keys = ["slow-1", "slow-2"]
    with psycopg.connect(database_url) as conn:
        ids = [
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, %s, 'internal_alert') RETURNING id",
                (key, f"{key}@slow.example"),
            ).fetchone()[0]  # type: ignore[index]
            for key in keys
        ]
    second = ScriptedProvider(
        reply=lambda _key: SmtpReply(421, "4.7.0 Try again later, too many messages", "rcpt")
    )

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(ledger, ScriptedProvider(), RetryPolicy(), fallback=second)
            service.gate.breaker = Breaker(BreakerState.OPEN, 5, time.monotonic(), 60.0)
            for send_id, key in zip(ids, keys, strict=True):
                await service.handle(origin_for(send_id, key, 0))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert second.sent == ["slow-1"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT attempts, last_error LIKE '%%slow.example is throttling%%' FROM email_sends"
            " WHERE dedupe_key = 'slow-2'"
        ).fetchall() == [(0, True)]


def test_a_mail_an_earlier_fallback_left_unknown_is_sent_once_an_operator_says_not_sent(
    database_url: str,
) -> None:
    """A mail left ``unknown`` at a SendGrid fallback, the consumers restarted with
    MAILBUS_FALLBACK_PROVIDER=postmark, and an operator's ``send resolve --not-sent`` (no
    provider took it): the fallback configured now sends it, as a primary switched since
    would (docs/providers.md#switching-providers), instead of it waiting, pending, for a
    SendGrid fallback that no consumer has any more."""
    (send_id,) = _alerts(database_url, ["alert-forgotten"])
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE email_sends SET status = 'unknown', provider = 'fallback:sendgrid',"
            " provider_kind = 'sendgrid', attempts = 1, first_tried_at = now(),"
            " in_doubt_since = now(), next_try_at = now()"
        )
    postmark = ScriptedProvider(reply=lambda _key: ProviderReply(200, "pm-1"))
    assert send_admin.change(database_url, "alert-forgotten", "not_sent", "ops")

    async def scenario() -> None:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30)
        await ledger.open()
        try:
            service = service_for(
                ledger,
                ScriptedProvider(),
                RetryPolicy(),
                fallback=postmark,
                fallback_kind="postmark",
            )
            await service.handle(origin_for(send_id, "alert-forgotten", 1))
        finally:
            await ledger.close()

    asyncio.run(scenario())
    assert postmark.sent == ["alert-forgotten"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT status, provider_kind, guarantee, message_id FROM email_sends"
        ).fetchall() == [("accepted", "postmark", "at_least_once", "pm-1")]


def _alerts(database_url: str, keys: list[str]) -> list[int]:
    """Pending alerts (``internal_alert``: ``when_provider_down: fallback``), never tried."""
    with psycopg.connect(database_url) as conn:
        return [
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template)"
                " VALUES (%s, 'ops@example.com', 'internal_alert') RETURNING id",
                (key,),
            ).fetchone()[0]  # type: ignore[index]
            for key in keys
        ]
