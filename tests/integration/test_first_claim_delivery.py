"""A first attempt through the real DeliveryService and ledger: a pointer whose header says
its row was never claimed is gated on the pointer, then loaded and claimed by one
statement; a pointer without it, and one read while the gate would hold it (a domain
paused, the breaker open), go the usual way; a mail found unfit once read ends as it ends
without the claim."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
from delivery_support import ScriptedProvider, origin_for, service_for

from mailbus.consumer.core import RetryPolicy
from mailbus.consumer.core.breaker import BreakerPolicy, BreakerState
from mailbus.consumer.core.outcome import ProviderReply
from mailbus.consumer.core.smtp_outcome import SmtpReply
from mailbus.consumer.ledger import SendLedger
from mailbus.consumer.provider import OutgoingMail, PreparedMail
from mailbus.consumer.service import DeliveryService

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


def _run(
    database_url: str,
    provider: ScriptedProvider,
    script: Callable[[DeliveryService, list[str]], Any],
    breaker: BreakerPolicy | None = None,
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
            await script(service_for(ledger, provider, POLICY, breaker), statements)
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
        await service.handle(origin_for(ids["new"], "new", 0, first_attempt="welcome"))
        seen["new"] = statements[:]
        statements.clear()
        # a pointer without the header: from a relay of an earlier build
        await service.handle(origin_for(ids["old"], "old", 0))
        seen["old"] = statements[:]
        statements.clear()
        # the same pointer again: the row moved on, nothing is called or written
        await service.handle(origin_for(ids["new"], "new", 0, first_attempt="welcome"))
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
        await service.handle(origin_for(ids["claimed"], "claimed", 0, first_attempt="welcome"))
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
            await service.handle(origin_for(ids[key], key, 0, first_attempt="welcome"))
            seen[key] = statements[:]

    _run(database_url, provider, script)
    assert seen["slow-1"] == ["claim_first_attempt", "settle"]  # no domain paused yet
    assert seen["slow-2"] == ["load_sends", "settle"]  # deferred, never claimed
    assert seen["fast-1"] == ["load_sends", "claim_for_send", "settle"]
    assert provider.sent == ["slow-1", "fast-1"]
    status, attempts, tried_at, *_ = _fields(database_url, "slow-2")
    assert (status, attempts, tried_at) == ("pending", 0, None)


def test_while_the_breaker_is_open_a_row_is_read_and_an_expired_one_settled_at_once(
    database_url: str,
) -> None:
    # The breaker opens on the first mail's 503 (threshold 1): an expired mail behind it
    # is settled without waiting for the breaker, as without the header.
    ids = _insert(database_url, ("down", "a@example.com"), ("late", "b@example.com"))
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET expires_at = now() WHERE dedupe_key = 'late'")
    provider = ScriptedProvider()  # 503 to every send
    seen: list[str] = []

    async def script(service: DeliveryService, statements: list[str]) -> None:
        await service.handle(origin_for(ids["down"], "down", 0, first_attempt="welcome"))
        assert service.gate.breaker.state is not BreakerState.CLOSED
        statements.clear()
        late = origin_for(ids["late"], "late", 0, first_attempt="welcome")
        await asyncio.wait_for(service.handle(late), timeout=10)  # the cool-down is 600 s
        seen.extend(statements)

    _run(database_url, provider, script, BreakerPolicy(failure_threshold=1, cool_down_s=600))
    assert seen == ["load_sends", "settle"]
    assert provider.sent == ["down"]
    assert _fields(database_url, "late")[:3] == ("expired", 0, None)


class _BrokenPrepare(ScriptedProvider):
    def prepare(self, mail: OutgoingMail) -> PreparedMail:
        raise RuntimeError("an adapter's bug")


def test_a_bug_once_the_row_is_read_leaves_it_as_if_never_claimed(database_url: str) -> None:
    # Before the claim-as-read, such a row stayed pending (the hourly republish took it);
    # it must not stay `sending` under a lease, to be looked up as a call in doubt.
    ids = _insert(database_url, ("buggy", "a@example.com"))
    provider = _BrokenPrepare()
    raised: list[BaseException] = []

    async def script(service: DeliveryService, statements: list[str]) -> None:
        try:
            await service.handle(origin_for(ids["buggy"], "buggy", 0, first_attempt="welcome"))
        except RuntimeError as exc:
            raised.append(exc)
        assert statements == ["claim_first_attempt", "settle"]

    _run(database_url, provider, script)
    assert [str(exc) for exc in raised] == ["an adapter's bug"]  # the runner logs it
    status, attempts, tried_at, guarantee, route, kind, key, lease, error = _fields(
        database_url, "buggy"
    )
    assert (status, attempts, tried_at, guarantee, route, kind, key, lease) == (
        "pending", 0, None, None, None, None, None, None
    )
    assert error == "internal error: RuntimeError"
    with psycopg.connect(database_url) as conn:
        (wait,) = conn.execute(
            "SELECT extract(epoch FROM next_try_at - now()) FROM email_sends"
        ).fetchone() or (None,)
    assert 5 < float(wait) <= POLICY.cap_s  # not published again at once, into the same bug


def test_a_suppression_is_weighed_once_the_row_is_read(database_url: str) -> None:
    # A receipt to an address unsubscribed from newsletters (scope bulk) is sent, with one
    # statement before its call; one to a hard-bounced address (scope all) ends suppressed
    # as it does without the claim.
    ids = _insert(
        database_url,
        ("receipt", "news-off@example.com"),
        ("bounced", "gone@example.com"),
        ("usual", "gone@example.com"),
    )
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_suppressions (address, reason)"
            " VALUES ('news-off@example.com', 'unsubscribed'), ('gone@example.com', 'hard_bounce')"
        )
    provider = ScriptedProvider(reply=lambda key: ProviderReply(200, f"msg-{key}"))
    seen: dict[str, list[str]] = {}

    async def script(service: DeliveryService, statements: list[str]) -> None:
        for key, header in (("receipt", "welcome"), ("bounced", "welcome"), ("usual", None)):
            statements.clear()
            await service.handle(origin_for(ids[key], key, 0, first_attempt=header))
            seen[key] = statements[:]

    _run(database_url, provider, script)
    assert seen == {
        "receipt": ["claim_first_attempt", "settle"],
        "bounced": ["claim_first_attempt", "settle"],
        "usual": ["load_sends", "settle"],
    }
    assert provider.sent == ["receipt"]
    assert _fields(database_url, "receipt")[:2] == ("accepted", 1)
    bounced, usual = _fields(database_url, "bounced"), _fields(database_url, "usual")
    assert bounced == usual and bounced[:8] == ("suppressed", 0, None, None, None, None, None, None)


def test_a_header_naming_another_template_decides_nothing(database_url: str) -> None:
    # Another producer's pointer, or a copied header: the claim refuses to act on a gate
    # decided for another template (its policy, its route); the row's own decides.
    ids = _insert(database_url, ("spoofed", "a@example.com"))
    provider = ScriptedProvider(reply=lambda key: ProviderReply(200, f"msg-{key}"))

    async def script(service: DeliveryService, statements: list[str]) -> None:
        await service.handle(origin_for(ids["spoofed"], "spoofed", 0, first_attempt="other"))
        assert statements == ["claim_first_attempt", "claim_for_send", "settle"]

    _run(database_url, provider, script)
    assert provider.sent == ["spoofed"]
    assert _fields(database_url, "spoofed")[:2] == ("accepted", 1)
