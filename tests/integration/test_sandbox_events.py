"""The whole loop locally: the sandbox accepts mail and emits signed delivery events,
`mailbus webhooks` records them in PostgreSQL."""

from __future__ import annotations

import asyncio

import aiohttp
import psycopg

from mailbus.feedback.server import start as start_receiver
from mailbus.feedback.store import EventStore
from mailbus.sandbox.app import DEFAULT_API_KEY
from mailbus.sandbox.emitter import EventEmitter
from mailbus.sandbox.outcomes import OutcomePlan
from mailbus.sandbox.server import start as start_sandbox

SECRET = "whsec_sandbox_loop_0123456789"


async def send_and_record(database_url: str, sandbox_url: str, count: int) -> dict[str, str]:
    """Send ``count`` mails to the sandbox and record each as accepted, as a consumer
    would; returns the addresses by message id."""
    addresses = {}
    headers = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for n in range(count):
            address = f"User{n}@Example.com"
            async with session.post(
                f"{sandbox_url}/v1/send",
                json={"to": address, "template": "t", "variables": {}},
                headers={"Idempotency-Key": f"k-{n}"},
            ) as response:
                assert response.status == 200
                message_id = (await response.json())["id"]
            with psycopg.connect(database_url) as conn:
                conn.execute(
                    "INSERT INTO email_sends (dedupe_key, to_address, template, status,"
                    " message_id) VALUES (%s, %s, 't', 'accepted', %s)",
                    (f"k-{n}", address, message_id),
                )
            addresses[message_id] = address
    return addresses


def test_sandbox_events_reach_the_table(database_url: str) -> None:
    plan = OutcomePlan(delay_ms=50, bounce_share=0.3, hard_share=0.7, complaint_share=0.2)

    async def scenario() -> tuple[dict[str, str], dict[str, int]]:
        store = EventStore(database_url)
        await store.open()
        receiver = await start_receiver(store, SECRET, sweep_s=0.2)
        emitter = EventEmitter(f"{receiver.url}/webhooks/sandbox", SECRET, plan, seed=11)
        sandbox = await start_sandbox(port=0, emitter=emitter)
        try:
            addresses = await send_and_record(database_url, sandbox.url, 60)
            for _ in range(100):
                await asyncio.sleep(0.1)
                with psycopg.connect(database_url) as conn:
                    left = conn.execute(
                        "SELECT count(*) FROM email_sends WHERE delivery_status IS NULL"
                    ).fetchone()
                    unmatched = conn.execute(
                        "SELECT count(*) FROM delivery_events WHERE NOT matched"
                    ).fetchone()
                if emitter.snapshot()["pending"] == 0 and left == (0,) and unmatched == (0,):
                    break
            counts = emitter.snapshot()
        finally:
            await sandbox.stop()
            await receiver.stop()
            await store.close()
        return addresses, counts

    addresses, counts = asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        events = conn.execute(
            "SELECT message_id, type, bounce FROM delivery_events ORDER BY occurred_at, event_id"
        ).fetchall()
        rows = dict(conn.execute("SELECT message_id, delivery_status FROM email_sends"))
        suppressed = {r[0] for r in conn.execute("SELECT address FROM email_suppressions")}
    assert counts["sent"] == len(events) and counts["refused"] == counts["failed"] == 0
    last: dict[str, str] = {}
    expected_suppressed = set()
    for message_id, kind, bounce in events:
        last[message_id] = kind
        if kind == "complained" or bounce == "hard":
            expected_suppressed.add(addresses[message_id].lower())
    assert rows == last and len(rows) == 60
    assert {"delivered", "bounced", "complained"} <= set(last.values())
    assert suppressed == expected_suppressed and suppressed


def test_a_wrong_secret_is_refused_and_counted(database_url: str) -> None:
    async def scenario() -> dict[str, int]:
        store = EventStore(database_url)
        await store.open()
        receiver = await start_receiver(store, SECRET)
        emitter = EventEmitter(
            f"{receiver.url}/webhooks/sandbox", "not-the-secret-at-all", OutcomePlan(delay_ms=0)
        )
        sandbox = await start_sandbox(port=0, emitter=emitter)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"{sandbox.url}/v1/send",
                    json={"to": "a@example.com", "template": "t"},
                    headers={
                        "Authorization": f"Bearer {DEFAULT_API_KEY}",
                        "Idempotency-Key": "k",
                    },
                ) as response:
                    assert response.status == 200
                for _ in range(50):
                    await asyncio.sleep(0.05)
                    if emitter.snapshot()["pending"] == 0:
                        break
                async with session.get(f"{sandbox.url}/_sandbox/events") as response:
                    return dict(await response.json())
        finally:
            await sandbox.stop()
            await receiver.stop()
            await store.close()

    counts = asyncio.run(scenario())
    assert (counts["sent"], counts["refused"], counts["failed"]) == (0, 1, 0)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM delivery_events").fetchone() == (0,)
