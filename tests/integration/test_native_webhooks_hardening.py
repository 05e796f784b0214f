"""The native webhooks against the providers' own documents and an attacker (issue 34,
review 2026-12-06-providers #6, #9-#11, #13, #14, #16, #20): the real receiver on a
loopback port over the test's own PostgreSQL, requests signed as each provider signs."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import psycopg
import pytest
from test_native_webhooks import (
    ADDRESS,
    MAILGUN_KEY,
    POSTMARK_AUTH,
    RESEND_SECRET,
    SENDGRID_KEY,
    SENDGRID_PUBLIC,
    T0,
    mailgun_token,
    post,
    postmark_bounce,
    seed,
)

from mailbus.feedback.native.routes import NativeReceiver
from mailbus.feedback.server import start
from mailbus.feedback.signature import signature_header
from mailbus.feedback.store import EventStore
from mailbus.providers.mailgun.sandbox import mailgun_signature
from mailbus.providers.mailgun.webhook import Mailgun
from mailbus.providers.postmark.webhook import Postmark
from mailbus.providers.resend.sandbox import svix_headers
from mailbus.providers.resend.webhook import Resend
from mailbus.providers.sendgrid.sandbox import sendgrid_headers
from mailbus.providers.sendgrid.webhook import SendGrid

SECRET = "mailbus-signature-secret-0123"


@asynccontextmanager
async def receivers(
    database_url: str, sent_through: str | None = None, n: int = 1, key_prefix: str = ""
) -> AsyncIterator[list[str]]:
    """``n`` receivers (replicas) over one database, every native route enabled."""
    started = []
    for _ in range(n):
        # (a keyword only when given: the same test runs against the code before it)
        options = {"sent_through": sent_through} if sent_through else {}
        store = EventStore(
            database_url, **options, **({"key_prefix": key_prefix} if key_prefix else {})
        )
        await store.open()
        native: list[NativeReceiver] = [
            Mailgun(MAILGUN_KEY),
            Resend(RESEND_SECRET),
            SendGrid(SENDGRID_PUBLIC),
            Postmark(":".join(POSTMARK_AUTH)),
        ]
        server = await start(store, SECRET, host="127.0.0.1", port=0, sweep_s=None, native=native)
        started.append((store, server))
    try:
        yield [server.url for _, server in started]
    finally:
        for store, server in started:
            await server.stop()
            await store.close()


def rows(database_url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql).fetchall()


def sends(database_url: str) -> list[tuple[Any, ...]]:
    return rows(database_url, "SELECT message_id, delivery_status FROM email_sends ORDER BY id")


def suppressions(database_url: str) -> list[tuple[Any, ...]]:
    return rows(database_url, "SELECT address, reason, scope FROM email_suppressions")


def mailgun(data: dict[str, Any], event_id: str, t: int | None = None) -> bytes:
    t = int(time.time()) if t is None else t
    signature = mailgun_signature(MAILGUN_KEY, t, mailgun_token(event_id))
    event = {"id": event_id, "timestamp": T0.timestamp(), "recipient": ADDRESS, **data}
    return json.dumps({"signature": signature, "event-data": event}).encode()


def headers_for(message_id: str) -> dict[str, Any]:
    return {"message": {"headers": {"message-id": message_id}}}


def sendgrid(items: list[dict[str, Any]]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(items).encode()
    return body, sendgrid_headers(SENDGRID_KEY, body, int(time.time()))


def sg_item(n: int, message_id: str, event: str = "delivered", **extra: Any) -> dict[str, Any]:
    return {
        "email": ADDRESS,
        "timestamp": int(T0.timestamp()) + n,
        "event": event,
        "sg_event_id": f"sg-{event}-{n}-{message_id}",
        "sg_message_id": f"{message_id}.filter0001.16648.5515E0B88.0",
        **extra,
    }


async def raw_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=io.BytesIO(body), headers=headers) as response,
    ):
        return response.status, await response.text()


def test_a_mailgun_signature_block_reposted_with_another_event_changes_nothing(
    database_url: str,
) -> None:
    """Review #9: Mailgun signs timestamp + token, not the body; the token is remembered
    in PostgreSQL, so a second replica refuses the replay too."""
    seed(database_url, "msg-1")
    delivered = mailgun({"event": "delivered", "id": "e-1", **headers_for("msg-1")}, "e-1")

    async def scenario() -> None:
        async with receivers(database_url, n=2) as (first, second):
            status, answer = await raw_post(f"{first}/webhooks/mailgun", delivered, {})
            assert status == 200, answer
            captured = json.loads(delivered)["signature"]
            forged = {
                "signature": captured,
                "event-data": {
                    "event": "failed",
                    "severity": "permanent",
                    "reason": "bounce",
                    "id": "e-forged",
                    "timestamp": T0.timestamp() + 60,
                    "recipient": ADDRESS,
                    **headers_for("msg-1"),
                },
            }
            for url in (first, second):
                status, answer = await raw_post(
                    f"{url}/webhooks/mailgun", json.dumps(forged).encode(), {}
                )
                assert (status, json.loads(answer)["error"]) == (
                    401,
                    "not verified as mailgun: replayed",
                )
            # the same post again (a retry) is a duplicate, never a refusal
            status, answer = await raw_post(f"{second}/webhooks/mailgun", delivered, {})
            assert (status, json.loads(answer)["result"]) == (200, "duplicate")

    asyncio.run(scenario())
    assert sends(database_url) == [("msg-1", "delivered")]
    assert suppressions(database_url) == []
    assert rows(database_url, "SELECT provider, event_id FROM delivery_events") == [
        ("mailgun", mailgun_token("e-1"))
    ]


def test_mailgun_event_ids_are_tokens_so_a_reused_event_data_id_is_a_new_event(
    database_url: str,
) -> None:
    """Review #20: ``event-data.id`` is unique "within a day" only."""
    seed(database_url, "msg-a")
    seed(database_url, "msg-b")
    one = mailgun({"event": "delivered", "id": "same", **headers_for("msg-a")}, "token-a")
    two = mailgun({"event": "delivered", "id": "same", **headers_for("msg-b")}, "token-b")

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            for body in (one, two):
                status, answer = await raw_post(f"{url}/webhooks/mailgun", body, {})
                assert (status, json.loads(answer)["stored"]) == (200, 1), answer

    asyncio.run(scenario())
    assert sends(database_url) == [("msg-a", "delivered"), ("msg-b", "delivered")]


@pytest.mark.parametrize("route", ["mailgun", "sendgrid", "resend", "postmark", "sandbox"])
def test_deep_or_huge_bodies_are_refused_before_authentication_never_500(
    database_url: str, route: str
) -> None:
    """Review #10 and #16: no traceback, no 500, on any route."""

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            status, _ = await raw_post(f"{url}/webhooks/{route}", b"[" * 200_000, {})
            assert status == 400
            nested = b'{"a":' * 40 + b"1" + b"}" * 40
            status, _ = await raw_post(f"{url}/webhooks/{route}", nested, {})
            assert status == 400
            huge = b" " * (17 * 1024 * 1024)
            status, _ = await raw_post(f"{url}/webhooks/{route}", huge, {})
            assert status == 413

    asyncio.run(scenario())


def test_a_sendgrid_batch_of_a_thousand_is_taken_and_one_bad_item_loses_nothing(
    database_url: str,
) -> None:
    """Review #16: 1,000 events (~400 KiB) fit; an item without ``sg_message_id`` is
    counted as invalid and the rest of its batch is stored."""
    for n in range(3):
        seed(database_url, f"sg-{n}")
    big, big_headers = sendgrid([sg_item(n, f"sg-{n % 3}", pad="x" * 250) for n in range(1000)])
    assert len(big) > 300 * 1024
    bad = sg_item(1, "sg-1", "bounce", type="bounce")
    del bad["sg_message_id"]
    mixed, mixed_headers = sendgrid([bad, sg_item(5000, "sg-2", "bounce", type="bounce")])

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            status, answer = await raw_post(f"{url}/webhooks/sendgrid", big, big_headers)
            assert (status, json.loads(answer)["stored"]) == (200, 1000), answer[:200]
            status, answer = await raw_post(f"{url}/webhooks/sendgrid", mixed, mixed_headers)
            got = json.loads(answer)
            assert (status, got["stored"], got["invalid"]) == (200, 1, 1), got

    asyncio.run(scenario())
    assert sends(database_url) == [
        ("sg-0", "delivered"),
        ("sg-1", "delivered"),
        ("sg-2", "bounced"),
    ]


def test_accepted_then_not_sent_is_dropped_with_the_providers_reason(database_url: str) -> None:
    """Review #6: SendGrid dropped, Resend email.failed / email.suppressed, Mailgun
    rejected become delivery_status 'dropped'; a drop for an address on the provider's
    unsubscribe list suppresses bulk mail only."""
    for message_id in ("sg-d", "sg-u", "rs-f", "rs-s", "mg-r"):
        seed(database_url, message_id)
    sg_body, sg_headers = sendgrid(
        [
            sg_item(1, "sg-d", "dropped", reason="Invalid"),
            sg_item(2, "sg-u", "dropped", reason="Unsubscribed Address"),
        ]
    )
    resend = []
    for event_id, kind, message_id in (
        ("msg_f", "email.failed", "rs-f"),
        ("msg_s", "email.suppressed", "rs-s"),
    ):
        body = json.dumps(
            {"type": kind, "created_at": T0.isoformat(), "data": {"email_id": message_id}}
        ).encode()
        resend.append((body, svix_headers(RESEND_SECRET, event_id, int(time.time()), body)))
    rejected = mailgun(
        {"event": "rejected", "reject": {"reason": "blocked"}, **headers_for("mg-r")}, "rej"
    )

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            assert (await raw_post(f"{url}/webhooks/sendgrid", sg_body, sg_headers))[0] == 200
            for body, headers in resend:
                assert (await raw_post(f"{url}/webhooks/resend", body, headers))[0] == 200
            assert (await raw_post(f"{url}/webhooks/mailgun", rejected, {}))[0] == 200

    asyncio.run(scenario())
    assert {m: s for m, s in sends(database_url)} == dict.fromkeys(
        ("sg-d", "sg-u", "rs-f", "rs-s", "mg-r"), "dropped"
    )
    reasons = dict(rows(database_url, "SELECT message_id, reason FROM delivery_events"))
    assert reasons["sg-d"] == "Invalid" and reasons["mg-r"] == "blocked"
    assert reasons["rs-s"] == "email.suppressed"
    assert suppressions(database_url) == [("ana@example.com", "unsubscribed", "bulk")]


@pytest.mark.parametrize(
    ("reason", "status", "suppressed"),
    [
        ("suppress-unsubscribe", "dropped", [("ana@example.com", "unsubscribed", "bulk")]),
        ("suppress-complaint", "dropped", [("ana@example.com", "complaint", "bulk")]),
        ("suppress-bounce", "dropped", [("ana@example.com", "hard_bounce", "all")]),
        ("old", "dropped", []),
        ("espblock", "dropped", []),
        ("bounce", "bounced", [("ana@example.com", "hard_bounce", "all")]),
    ],
)
def test_mailgun_permanent_failures_are_read_by_reason(
    database_url: str, reason: str, status: str, suppressed: list[tuple[str, str, str]]
) -> None:
    """Review #13: only a bounce is a hard bounce; an unsubscribe drop never stops a
    password reset."""
    seed(database_url, "mg-1")
    body = mailgun(
        {"event": "failed", "severity": "permanent", "reason": reason, **headers_for("mg-1")},
        "f-1",
    )

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            answer = await raw_post(f"{url}/webhooks/mailgun", body, {})
            assert answer[0] == 200, answer

    asyncio.run(scenario())
    assert sends(database_url) == [("mg-1", status)]
    assert suppressions(database_url) == suppressed


def test_a_resend_bounce_without_a_type_is_hard(database_url: str) -> None:
    """Review #14: "email.bounced: the recipient's mail server permanently rejected"."""
    seed(database_url, "rs-b")
    body = json.dumps(
        {"type": "email.bounced", "created_at": T0.isoformat(), "data": {"email_id": "rs-b"}}
    ).encode()
    headers = svix_headers(RESEND_SECRET, "msg_b", int(time.time()), body)

    async def scenario() -> None:
        async with receivers(database_url) as (url,):
            answer = await raw_post(f"{url}/webhooks/resend", body, headers)
            assert answer[0] == 200, answer

    asyncio.run(scenario())
    assert suppressions(database_url) == [("ana@example.com", "hard_bounce", "all")]


def test_an_event_matches_only_the_sends_of_its_provider(database_url: str) -> None:
    """Review #11: with MAILBUS_PROVIDER=ses, a Postmark bounce naming an SES row's id is
    unmatched; the fallback's (HTTP) rows take only Mailbus-Signature events."""
    seed(database_url, "ses-1")
    fallback = seed(database_url, "fb-1")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET provider = 'fallback' WHERE id = %s", (fallback,))
    now = int(time.time())
    generic = json.dumps(
        {"id": "g-1", "type": "delivered", "message_id": "fb-1", "occurred_at": T0.isoformat()}
    ).encode()
    signed = {"Mailbus-Signature": signature_header(SECRET, "/webhooks/sandbox", generic, now)}

    async def scenario() -> None:
        async with receivers(database_url, sent_through="ses") as (url,):
            for message_id, event_id in (("ses-1", "7"), ("fb-1", "8")):
                request = postmark_bounce(message_id, event_id, now)
                status, answer = await post(f"{url}/webhooks/postmark", request)
                assert (status, answer["unmatched"]) == (200, 1), answer
            status, _ = await raw_post(f"{url}/webhooks/sandbox", generic, signed)
            assert status == 200

    asyncio.run(scenario())
    assert sends(database_url) == [("ses-1", None), ("fb-1", "delivered")]
    assert suppressions(database_url) == []


def test_the_token_table_is_pruned(database_url: str) -> None:
    async def scenario() -> None:
        store = EventStore(database_url)
        await store.open()
        try:
            digest = hashlib.sha256(b"x").digest()
            assert await store.remember_token("mailgun", "t-1", digest)
            assert await store.remember_token("mailgun", "t-1", digest)
            assert not await store.remember_token("mailgun", "t-1", hashlib.sha256(b"y").digest())
            assert await store.prune_tokens(3600) == 0
            assert await store.prune_tokens(0) == 1
        finally:
            await store.close()

    asyncio.run(scenario())


def unknown_row(database_url: str, key: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
            " guarantee) VALUES (%s, %s, 't', 'unknown', 1, 'at_most_once')",
            (key, ADDRESS),
        )


def test_an_unknown_send_is_settled_by_its_providers_event_carrying_its_key(
    database_url: str,
) -> None:
    """Review #18: SendGrid's custom_args and Mailgun's v: variables come back in their
    events; one that proves acceptance settles the `unknown` send with its message id. A
    drop proves nothing, and a Postmark event cannot settle a SendGrid send."""
    for key in ("k-sg", "k-mg", "k-drop", "k-other"):
        unknown_row(database_url, key)
    sg_body, sg_headers = sendgrid(
        [
            sg_item(1, "sg-x", "delivered", dedupe_key="k-sg"),
            sg_item(2, "sg-d", "dropped", reason="Invalid", dedupe_key="k-drop"),
        ]
    )

    def mg_body(event_id: str) -> bytes:
        data = {"event": "delivered", "user-variables": {"dedupe_key": "k-mg"}}
        return mailgun({**data, **headers_for("<mg-x@mg.example.com>")}, event_id)

    async def scenario() -> None:
        async with receivers(database_url, sent_through="sendgrid") as (url,):
            status, answer = await raw_post(f"{url}/webhooks/sendgrid", sg_body, sg_headers)
            assert (status, json.loads(answer)["settled"]) == (200, 1), answer
            # MAILBUS_PROVIDER=sendgrid: a Mailgun event cannot settle its sends
            status, answer = await raw_post(f"{url}/webhooks/mailgun", mg_body("mg-1"), {})
            assert (status, json.loads(answer)["settled"]) == (200, 0), answer
        async with receivers(database_url) as (url,):  # no named provider: any may settle
            status, answer = await raw_post(f"{url}/webhooks/mailgun", mg_body("mg-2"), {})
            assert (status, json.loads(answer)["settled"]) == (200, 1), answer

    asyncio.run(scenario())
    assert rows(
        database_url,
        "SELECT dedupe_key, status, message_id, delivery_status FROM email_sends ORDER BY id",
    ) == [
        ("k-sg", "accepted", "sg-x", "delivered"),
        ("k-mg", "accepted", "mg-x@mg.example.com", "delivered"),
        ("k-drop", "unknown", None, None),
        ("k-other", "unknown", None, None),
    ]


def test_an_event_settles_only_the_life_and_deployment_its_key_names(database_url: str) -> None:
    """docs/providers.md#the-key-the-provider-sees: the key an event echoes is the provider
    key. A SendGrid event for the first life (``k-life``) or another deployment's prefix
    never settles the ``unknown`` row sent as ``stg:k-life~2``; the event for that key does."""
    unknown_row(database_url, "k-life")
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE email_sends SET provider_key = 'stg:k-life~2'")

    def posted(n: int, key: str) -> tuple[bytes, dict[str, str]]:
        return sendgrid([sg_item(n, f"sg-{n}", "delivered", dedupe_key=key)])

    async def scenario() -> list[int]:
        settled = []
        async with receivers(database_url, sent_through="sendgrid", key_prefix="stg:") as (url,):
            for n, key in enumerate(("stg:k-life", "prod:k-life~2", "stg:k-life~2")):
                status, answer = await raw_post(f"{url}/webhooks/sendgrid", *posted(n, key))
                assert status == 200, answer
                settled.append(json.loads(answer)["settled"])
        return settled

    assert asyncio.run(scenario()) == [0, 0, 1]
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT status, message_id FROM email_sends").fetchone()
    assert row == ("accepted", "sg-2")
