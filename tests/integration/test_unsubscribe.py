"""Unsubscribe end to end: links written by the real fan-out into real PostgreSQL, then
the real `mailbus webhooks` server on a loopback port answering a real HTTP client."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import psycopg
from ledger_support import suppressed_at_load

from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.store import CampaignSpec, create_campaign, transition
from mailbus.campaigns.unsubscribe import Links, make_token, verify_token
from mailbus.feedback.server import RunningReceiver, start
from mailbus.feedback.store import EventStore

SECRET = "unsub_integration_0123456789"
WEBHOOK_SECRET = "whsec_integration_0123456789"
BASE = "https://mail.example.test/m/"
ONE_CLICK = {"Content-Type": "application/x-www-form-urlencoded"}


def fan_out(database_url: str, emails: list[str], links: Links | None) -> int:
    lines = ["user_id,email,first_name"] + [f"u{i},{e},N{i}" for i, e in enumerate(emails)]
    report = create_campaign(
        database_url,
        CampaignSpec(name="spring", template="newsletter", rate_per_min=10**8),
        io.BytesIO(("\n".join(lines) + "\n").encode()),
        lambda rejected: None,
    )
    transition(database_url, report.campaign_id, "start")
    pacer = Pacer(database_url, max_batch=7, links=links)
    with psycopg.connect(database_url, autocommit=True) as conn:
        while (tick := pacer.tick(conn, report.campaign_id)) and not tick.fanned_out:
            pass
    return report.campaign_id


def rows(database_url: str, campaign_id: int) -> dict[str, tuple[int, dict[str, Any]]]:
    """``{user_id: (send id, payload)}`` of the campaign's rows."""
    with psycopg.connect(database_url) as conn:
        return {
            key.rsplit("-", 1)[1]: (send_id, payload)
            for send_id, key, payload in conn.execute(
                "SELECT id, dedupe_key, payload_json FROM email_sends WHERE campaign_id = %s",
                (campaign_id,),
            )
        }


def suppressions(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT address, reason, source, created_at FROM email_suppressions ORDER BY address"
        ).fetchall()


def token_of(payload: dict[str, Any]) -> str:
    return str(payload["unsubscribe_url"]).rsplit("/", 1)[1]


def test_fan_out_rows_carry_a_signed_link_and_the_rfc_8058_headers(database_url: str) -> None:
    emails = [f"User{i}@Example.com" for i in range(20)]
    # Long addresses: their payload's base64 is longer than encode()'s 76-character lines.
    emails += [f"{'x' * 60}.{i}@{'long-domain.' * 5}example.com" for i in range(3)]
    campaign_id = fan_out(database_url, emails, Links(SECRET, BASE))
    found = rows(database_url, campaign_id)
    assert len(found) == len(emails)
    for i, email in enumerate(emails):
        _send_id, payload = found[f"u{i}"]
        url = payload["unsubscribe_url"]
        assert url.startswith("https://mail.example.test/m/unsubscribe/")
        said = verify_token(token_of(payload), SECRET, 0)
        assert said is not None, url
        assert (said.address, said.campaign_id) == (email.lower(), campaign_id)
        assert payload["first_name"] == f"N{i}"  # the recipient's own variables stay
        assert payload["headers"] == {
            "List-Unsubscribe": f"<{url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        }
        # The SQL-made token is the one the Python module makes for that moment.
        assert token_of(payload) == make_token(SECRET, email, campaign_id, said.issued_at)


def test_without_a_secret_rows_carry_no_link(database_url: str) -> None:
    campaign_id = fan_out(database_url, ["a@example.com", "b@example.com"], None)
    for _send_id, payload in rows(database_url, campaign_id).values():
        assert set(payload) == {"user_id", "first_name"}


async def _serve(
    database_url: str,
    scenario: Callable[[aiohttp.ClientSession, RunningReceiver], Awaitable[None]],
    unsubscribe_secret: str = SECRET,
    unsubscribe_previous: str = "",
) -> None:
    store = EventStore(database_url, max_connections=2)
    await store.open()
    server = await start(
        store,
        WEBHOOK_SECRET,
        port=0,
        sweep_s=None,
        unsubscribe_secret=unsubscribe_secret,
        unsubscribe_previous=unsubscribe_previous,
    )
    try:
        async with aiohttp.ClientSession() as session:
            await scenario(session, server)
    finally:
        await server.stop()
        await store.close()


def test_a_valid_token_suppresses_and_unsent_mail_ends_suppressed(database_url: str) -> None:
    emails = ["Ana@Example.com", "bo@example.com", "cy@example.com"]
    campaign_id = fan_out(database_url, emails, Links(SECRET, BASE))
    found = rows(database_url, campaign_id)
    ana_id, ana = found["u0"]
    path = urlsplit(ana["unsubscribe_url"]).path.removeprefix("/m")
    # Bulk mail of Ana's not yet sent (a newsletter, other case), and someone else's.
    with psycopg.connect(database_url) as conn:
        (later_id,) = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('later-1', 'ANA@example.COM', 'newsletter_weekly') RETURNING id"
        ).fetchone() or (0,)
    others = [found["u1"][0], found["u2"][0]]
    assert suppressed_at_load(database_url, [ana_id, later_id, *others]) == dict.fromkeys(
        [ana_id, later_id, *others], False
    )

    async def scenario(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        # GET (a scanner, a link preview, the user opening the page): a form, no change.
        async with session.get(server.url + path) as response:
            assert response.status == 200
            page = await response.text()
        assert 'method="post"' in page and "ana@example.com" in page
        assert suppressions(database_url) == []
        # The one-click POST (RFC 8058).
        async with session.post(
            server.url + path, data="List-Unsubscribe=One-Click", headers=ONE_CLICK
        ) as response:
            assert response.status == 200
        entries = suppressions(database_url)
        assert [e[:3] for e in entries] == [
            ("ana@example.com", "unsubscribed", f"campaign:{campaign_id}")
        ]
        # A second POST (the user presses the button again) is harmless.
        async with session.post(
            server.url + path, data="List-Unsubscribe=One-Click", headers=ONE_CLICK
        ) as response:
            assert response.status == 200
        assert suppressions(database_url) == entries

    asyncio.run(_serve(database_url, scenario))
    assert suppressed_at_load(database_url, [ana_id, later_id, *others]) == {
        ana_id: True,
        later_id: True,
        others[0]: False,
        others[1]: False,
    }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_forged_or_tampered_tokens_change_nothing(database_url: str) -> None:
    campaign_id = fan_out(database_url, ["ana@example.com"], Links(SECRET, BASE))
    ((_send_id, ana),) = rows(database_url, campaign_id).values()
    token = token_of(ana)
    payload, signature = token.split(".")
    said = verify_token(token, SECRET, 0)
    assert said is not None
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    forged = [
        make_token("another secret", "ana@example.com", campaign_id, said.issued_at),
        f"{_b64(f'1:{campaign_id}:{said.issued_at}:bo@example.com'.encode())}.{signature}",
        f"{payload}.{flipped}",
        f"{payload}.",
        "garbage",
        "a.b.c",
    ]
    with psycopg.connect(database_url) as conn:  # an entry that must keep its reason
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source)"
            " VALUES ('zed@example.com', 'hard_bounce', 'webhook:x')"
        )
    before = suppressions(database_url)

    async def scenario(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        for bad in forged:
            for method in ("GET", "POST"):
                async with session.request(
                    method,
                    f"{server.url}/unsubscribe/{bad}",
                    data="List-Unsubscribe=One-Click",
                    headers=ONE_CLICK,
                ) as response:
                    assert response.status == 404, (method, bad)
        assert suppressions(database_url) == before

    asyncio.run(_serve(database_url, scenario))
    assert suppressions(database_url) == before


def test_an_address_already_suppressed_in_another_case_keeps_its_entry(
    database_url: str,
) -> None:
    campaign_id = fan_out(database_url, ["ana@example.com"], Links(SECRET, BASE))
    ((_send_id, ana),) = rows(database_url, campaign_id).values()
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_suppressions (address, reason, source)"
            " VALUES ('Ana@Example.com', 'complaint', 'webhook:x')"
        )
    before = suppressions(database_url)

    async def scenario(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        async with session.post(
            f"{server.url}/unsubscribe/{token_of(ana)}",
            data="List-Unsubscribe=One-Click",
            headers=ONE_CLICK,
        ) as response:
            assert response.status == 200

    asyncio.run(_serve(database_url, scenario))
    assert suppressions(database_url) == before


def test_without_an_unsubscribe_secret_the_routes_do_not_exist(database_url: str) -> None:
    token = make_token(SECRET, "ana@example.com", 1, 0)

    async def scenario(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        async with session.post(f"{server.url}/unsubscribe/{token}") as response:
            assert response.status in (404, 405)

    asyncio.run(_serve(database_url, scenario, unsubscribe_secret=""))
    assert suppressions(database_url) == []


def test_a_link_sent_before_a_rotation_still_unsubscribes(database_url: str) -> None:
    """The fan-out signed with the old secret; the receiver now runs with the new one and
    MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS: the link sent still works, a forged one does not."""
    old, new = SECRET, "unsub_rotated_secret_9876543210"
    campaign_id = fan_out(database_url, ["ana@example.com", "bo@example.com"], Links(old, BASE))
    found = rows(database_url, campaign_id)
    ana_path = urlsplit(found["u0"][1]["unsubscribe_url"]).path.removeprefix("/m")
    bo_path = urlsplit(found["u1"][1]["unsubscribe_url"]).path.removeprefix("/m")

    async def post(session: aiohttp.ClientSession, url: str) -> int:
        async with session.post(url, data="List-Unsubscribe=One-Click", headers=ONE_CLICK) as r:
            return r.status

    async def rotated(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        assert await post(session, server.url + ana_path) == 200
        forged = make_token("not-the-secret-0123456789", "cy@example.com", campaign_id, 0)
        assert await post(session, f"{server.url}/unsubscribe/{forged}") == 404

    async def previous_dropped(session: aiohttp.ClientSession, server: RunningReceiver) -> None:
        assert await post(session, server.url + bo_path) == 404

    asyncio.run(_serve(database_url, rotated, unsubscribe_secret=new, unsubscribe_previous=old))
    asyncio.run(_serve(database_url, previous_dropped, unsubscribe_secret=new))
    assert [e[:2] for e in suppressions(database_url)] == [("ana@example.com", "unsubscribed")]
