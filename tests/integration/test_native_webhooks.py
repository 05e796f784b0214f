"""Providers' own delivery events end to end: the real receiver on a loopback port, each
request signed by the providers' sandbox imitations (written from the providers' documents),
verified by mailbus with the providers' libraries, recorded in the test's own PostgreSQL.
SES: SNS certificates and the subscription handshake over https from a local server whose
CA is pinned (MAILBUS_SES_CA_FILE)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from sns_support import Pki, make_pki

from mailbus.feedback.native.routes import NativeReceiver
from mailbus.feedback.server import start
from mailbus.feedback.store import EventStore
from mailbus.providers.mailgun import events as mailgun_events
from mailbus.providers.mailgun.sandbox import mailgun_signature
from mailbus.providers.mailgun.webhook import Mailgun
from mailbus.providers.postmark.sandbox import basic_authorization
from mailbus.providers.postmark.webhook import Postmark
from mailbus.providers.resend import events as resend_events
from mailbus.providers.resend.sandbox import svix_headers
from mailbus.providers.resend.webhook import Resend
from mailbus.providers.sendgrid import events as sendgrid_events
from mailbus.providers.sendgrid.sandbox import sendgrid_headers
from mailbus.providers.sendgrid.webhook import SendGrid
from mailbus.providers.ses.certificates import CertificateSource
from mailbus.providers.ses.sandbox import sns_signed
from mailbus.providers.ses.webhook import Ses

ADDRESS = "Ana@Example.com"
T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
MAILGUN_KEY = "key-mailgun-signing-0123456789"
RESEND_SECRET = "whsec_" + base64.b64encode(b"resend-test-secret-0123456789abc").decode()
POSTMARK_AUTH = ("hooks", "s3cret:pass")
TOPIC = "arn:aws:sns:eu-west-1:123456789012:mailbus-ses"
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
SENDGRID_PUBLIC = base64.b64encode(
    SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
).decode()


def seed(database_url: str, message_id: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, message_id)"
            " VALUES (%s, %s, 't', 'accepted', %s) RETURNING id",
            (f"key-{message_id}", ADDRESS, message_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def state(database_url: str) -> dict[str, Any]:
    with psycopg.connect(database_url) as conn:
        return {
            "sends": conn.execute(
                "SELECT message_id, delivery_status, last_event_at FROM email_sends ORDER BY id"
            ).fetchall(),
            "events": conn.execute(
                "SELECT provider, event_id, type FROM delivery_events ORDER BY event_id"
            ).fetchall(),
            "suppressions": conn.execute(
                "SELECT address, reason, source FROM email_suppressions"
            ).fetchall(),
        }


@dataclass
class Request:
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@asynccontextmanager
async def serving(database_url: str, native: list[NativeReceiver]) -> AsyncIterator[str]:
    store = EventStore(database_url)
    await store.open()
    server = await start(store, "", host="127.0.0.1", port=0, sweep_s=None, native=native)
    try:
        yield server.url
    finally:
        await server.stop()
        await store.close()


async def post(url: str, request: Request) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=request.body, headers=request.headers) as response,
    ):
        return response.status, await response.json()


def mailgun_token(event_id: str) -> str:
    """Mailgun's one token per event (the receiver's event id), kept across its retries."""
    return hashlib.sha256(event_id.encode()).hexdigest()[:50]


def mailgun_bounce(message_id: str, event_id: str, t: int, key: str = MAILGUN_KEY) -> Request:
    body = {
        "signature": mailgun_signature(key, t, mailgun_token(event_id)),
        "event-data": {
            "event": "failed",
            "severity": "permanent",
            "id": event_id,
            "timestamp": T0.timestamp(),
            "recipient": ADDRESS,
            "message": {"headers": {"message-id": message_id}},
        },
    }
    return Request(json.dumps(body).encode(), {"Content-Type": "application/json"})


def resend_bounce(message_id: str, event_id: str, t: int, secret: str = RESEND_SECRET) -> Request:
    body = json.dumps(
        {
            "type": "email.bounced",
            "created_at": T0.isoformat(),
            "data": {
                "email_id": message_id,
                "to": [ADDRESS],
                "bounce": {"type": "Permanent", "subType": "General", "message": "no"},
            },
        }
    ).encode()
    return Request(body, svix_headers(secret, event_id, t, body))


def sendgrid_bounce(
    message_id: str, event_id: str, t: int, key: ec.EllipticCurvePrivateKey = SENDGRID_KEY
) -> Request:
    body = json.dumps(
        [
            {
                "email": ADDRESS,
                "timestamp": int(T0.timestamp()),
                "event": "processed",
                "sg_event_id": event_id + "-p",
                "sg_message_id": f"{message_id}.filter0001.1.0",
            },
            {
                "email": ADDRESS,
                "timestamp": int(T0.timestamp()),
                "event": "bounce",
                "type": "bounce",
                "sg_event_id": event_id,
                "sg_message_id": f"{message_id}.filter0001.16648.5515E0B88.0",
            },
        ]
    ).encode()
    return Request(body, sendgrid_headers(key, body, t))


def postmark_bounce(
    message_id: str, event_id: str, t: int, auth: tuple[str, str] = POSTMARK_AUTH
) -> Request:
    body = json.dumps(
        {
            "RecordType": "Bounce",
            "ID": int(event_id),
            "Type": "HardBounce",
            "TypeCode": 1,
            "MessageID": message_id,
            "Email": ADDRESS,
            "BouncedAt": T0.isoformat(),
        }
    ).encode()
    return Request(body, {"Authorization": basic_authorization(*auth)})


PROVIDERS: dict[str, tuple[Callable[[], NativeReceiver], Callable[..., Request], Any]] = {
    "mailgun": (lambda: Mailgun(MAILGUN_KEY), mailgun_bounce, {"key": "key-not-the-one-0123"}),
    "resend": (
        lambda: Resend(RESEND_SECRET),
        resend_bounce,
        {"secret": "whsec_" + base64.b64encode(b"another-secret-entirely-01234567").decode()},
    ),
    "sendgrid": (
        lambda: SendGrid(SENDGRID_PUBLIC),
        sendgrid_bounce,
        {"key": ec.generate_private_key(ec.SECP256R1())},
    ),
    "postmark": (
        lambda: Postmark(":".join(POSTMARK_AUTH)),
        postmark_bounce,
        {"auth": ("hooks", "guess")},
    ),
}


STALE_AFTER = {
    "mailgun": mailgun_events.TOLERANCE_S,
    "sendgrid": sendgrid_events.TOLERANCE_S,
    "resend": resend_events.TOLERANCE_S,
}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_provider_event_is_verified_its_way_applied_once_and_forged_or_stale_ones_change_nothing(
    database_url: str, provider: str
) -> None:
    make_receiver, bounce, forged_with = PROVIDERS[provider]
    seed(database_url, "msg-1")

    async def scenario() -> None:
        async with serving(database_url, [make_receiver()]) as url:
            endpoint = f"{url}/webhooks/{provider}"
            now = int(time.time())
            before = state(database_url)
            status, answer = await post(endpoint, bounce("msg-1", "1001", now, **forged_with))
            assert status == 401, answer
            if provider != "postmark":  # Postmark signs no time: nothing can be stale
                # stale: 401, which the provider retries (review #15), counted and alerted
                old = now - STALE_AFTER[provider] - 100
                status, answer = await post(endpoint, bounce("msg-1", "1001", old))
                assert status == 401 and "stale" in answer["error"], answer
            assert state(database_url) == before
            valid = bounce("msg-1", "1001", now)
            status, answer = await post(endpoint, valid)
            assert (status, answer["stored"], answer["suppressed"]) == (200, 1, 1), answer
            again = bounce("msg-1", "1001", int(time.time()))  # a replay, signed anew
            status, answer = await post(endpoint, again)
            assert (status, answer["result"], answer["duplicate"]) == (200, "duplicate", 1)

    asyncio.run(scenario())
    after = state(database_url)
    assert after["sends"] == [("msg-1", "bounced", T0)]
    event_id = {"postmark": "Bounce:1001", "mailgun": mailgun_token("1001")}.get(provider, "1001")
    assert [row[:2] for row in after["events"]] == [(provider, event_id)]
    assert after["suppressions"] == [("ana@example.com", "hard_bounce", f"webhook:{provider}")]


# --- SES through SNS -------------------------------------------------------------------


@asynccontextmanager
async def aws_side(pki: Pki) -> AsyncIterator[tuple[str, list[str]]]:
    """https://127.0.0.1:PORT serving the signing certificate and the SubscribeURL."""
    confirmed: list[str] = []

    async def certificate(_request: web.Request) -> web.Response:
        return web.Response(body=pki.signing_pem)

    async def confirm(request: web.Request) -> web.Response:
        confirmed.append(request.query.get("Token", ""))
        return web.Response(text="<ConfirmSubscriptionResponse/>")

    app = web.Application()
    app.router.add_get("/SimpleNotificationService.pem", certificate)
    app.router.add_get("/confirm", confirm)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=pki.server_context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}", confirmed
    finally:
        await runner.cleanup()


def sns_message(base: str, kind: str, message: str, sent: datetime, **extra: str) -> dict[str, Any]:
    return {
        "Type": kind,
        "MessageId": str(uuid.uuid4()),
        "TopicArn": TOPIC,
        "Message": message,
        "Timestamp": sent.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "SigningCertURL": f"{base}/SimpleNotificationService.pem",
        **extra,
    }


def ses_bounce(message_id: str) -> str:
    return json.dumps(
        {
            "eventType": "Bounce",
            "mail": {
                "messageId": message_id,
                "timestamp": T0.isoformat(),
                "destination": [ADDRESS],
            },
            "bounce": {
                "bounceType": "Permanent",
                "bounceSubType": "General",
                "timestamp": T0.isoformat(),
                "bouncedRecipients": [{"emailAddress": ADDRESS}],
            },
        }
    )


def test_ses_through_sns_handshake_signature_versions_forgery_replay_and_staleness(
    database_url: str, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    seed(database_url, "ses-msg-1")

    async def scenario() -> None:
        async with aws_side(pki) as (base, confirmed):
            source = CertificateSource(frozenset({"127.0.0.1"}), str(pki.ca_file))
            try:
                async with serving(database_url, [Ses(frozenset({TOPIC}), source)]) as url:
                    endpoint = f"{url}/webhooks/ses"
                    now = datetime.now(UTC)

                    async def send(message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
                        return await post(endpoint, Request(json.dumps(message).encode()))

                    # The handshake: a signed SubscriptionConfirmation is confirmed.
                    subscribe = sns_signed(
                        sns_message(
                            base,
                            "SubscriptionConfirmation",
                            "confirm it",
                            now,
                            Token="tok-1",
                            SubscribeURL=f"{base}/confirm?Token=tok-1",
                        ),
                        pki.signing_key,
                        "1",
                    )
                    assert await send(subscribe) == (200, {"result": "subscribed"})
                    assert confirmed == ["tok-1"]
                    # A forged one is not: a changed SubscribeURL breaks the signature.
                    forged = {**subscribe, "SubscribeURL": f"{base}/confirm?Token=evil"}
                    assert (await send(forged))[0] == 401
                    before = state(database_url)
                    bounce = sns_message(base, "Notification", ses_bounce("ses-msg-1"), now)
                    refused = [
                        # signed by another key
                        sns_signed(
                            bounce, rsa.generate_private_key(public_exponent=65537, key_size=2048)
                        ),
                        # a certificate host that is not allowed
                        sns_signed(
                            {**bounce, "SigningCertURL": "https://evil.example/c.pem"},
                            pki.signing_key,
                        ),
                        # plain http
                        sns_signed(
                            {
                                **bounce,
                                "SigningCertURL": base.replace("https", "http")
                                + "/SimpleNotificationService.pem",
                            },
                            pki.signing_key,
                        ),
                        # another topic, validly signed
                        sns_signed({**bounce, "TopicArn": TOPIC + "-other"}, pki.signing_key),
                    ]
                    for message in refused:
                        assert (await send(message))[0] == 401
                    stale = sns_message(
                        base, "Notification", ses_bounce("ses-msg-1"), now - timedelta(hours=2)
                    )
                    status, answer = await send(sns_signed(stale, pki.signing_key))
                    assert (status, answer["error"]) == (401, "not verified as ses: stale")
                    assert state(database_url) == before
                    status, answer = await send(sns_signed(bounce, pki.signing_key, "2"))
                    assert (status, answer["stored"], answer["suppressed"]) == (200, 1, 1)
                    # SNS retries with the same MessageId (version 1 this time): once only.
                    status, answer = await send(sns_signed(bounce, pki.signing_key, "1"))
                    assert (status, answer["result"]) == (200, "duplicate")
                    assert confirmed == ["tok-1"]
            finally:
                await source.close()

    asyncio.run(scenario())
    after = state(database_url)
    assert after["sends"] == [("ses-msg-1", "bounced", T0)]
    assert after["suppressions"] == [("ana@example.com", "hard_bounce", "webhook:ses")]
