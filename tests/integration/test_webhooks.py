"""`mailbus webhooks` end to end: the real aiohttp server on a loopback port, signed
requests from a real HTTP client, the real PostgreSQL of the test's own database."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import psycopg
from ledger_support import suppressed_at_load
from services import REPO, run_mailbus

from mailbus.feedback.events import STATUS_RANK, parse_event
from mailbus.feedback.server import RunningReceiver, start
from mailbus.feedback.signature import signature_header
from mailbus.feedback.store import EventStore

SANDBOX = "/webhooks/sandbox"
SECRET = "whsec_integration_0123456789"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def seed(database_url: str, sends: list[tuple[str, str]]) -> dict[str, int]:
    """Accepted rows ``(message_id, to_address)``; returns their ids by message_id."""
    ids = {}
    with psycopg.connect(database_url) as conn:
        for number, (message_id, address) in enumerate(sends):
            row = conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, status, message_id)"
                " VALUES (%s, %s, 't', 'accepted', %s) RETURNING id",
                (f"key-{number}-{message_id}", address, message_id),
            ).fetchone()
            assert row is not None
            ids[message_id] = row[0]
    return ids


def snapshot(database_url: str) -> dict[str, Any]:
    """Everything a delivery event may change."""
    with psycopg.connect(database_url) as conn:
        return {
            "sends": conn.execute(
                "SELECT id, status, delivery_status, last_event_at, updated_at"
                " FROM email_sends ORDER BY id"
            ).fetchall(),
            "events": conn.execute(
                "SELECT provider, event_id, type, occurred_at FROM delivery_events"
                " ORDER BY provider, event_id"
            ).fetchall(),
            "suppressions": conn.execute(
                "SELECT address, reason, source FROM email_suppressions ORDER BY address"
            ).fetchall(),
        }


def event(
    event_id: str, kind: str, message_id: str, at: datetime, bounce: str | None = None
) -> bytes:
    document = {
        "id": event_id,
        "type": kind,
        "message_id": message_id,
        "occurred_at": at.isoformat(),
    }
    if bounce:
        document["bounce"] = bounce
    return json.dumps(document).encode()


class Client:
    def __init__(self, session: aiohttp.ClientSession, receiver: RunningReceiver) -> None:
        self.session = session
        self.url = receiver.url

    async def post(
        self,
        body: bytes,
        *,
        provider: str = "sandbox",
        secret: str = SECRET,
        t: int | None = None,
        header: str | None = ...,  # type: ignore[assignment]
    ) -> tuple[int, dict[str, Any]]:
        if header is ...:
            path, now = f"/webhooks/{provider}", int(time.time()) if t is None else t
            header = signature_header(secret, path, body, now)
        headers = {"Content-Type": "application/json"}
        if header is not None:
            headers["Mailbus-Signature"] = header
        async with self.session.post(
            f"{self.url}/webhooks/{provider}", data=body, headers=headers
        ) as response:
            return response.status, await response.json()

    async def get(self, path: str) -> int:
        async with self.session.get(f"{self.url}{path}") as response:
            return response.status


@asynccontextmanager
async def receiver(database_url: str) -> AsyncIterator[Client]:
    store = EventStore(database_url, max_connections=8)
    await store.open()
    server = await start(store, SECRET, host="127.0.0.1", port=0)
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(session, server)
    finally:
        await server.stop()
        await store.close()


def run(database_url: str, scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with receiver(database_url) as client:
            await scenario(client)

    asyncio.run(main())


def test_a_valid_signed_event_updates_the_row(database_url: str) -> None:
    ids = seed(database_url, [("msg-1", "ana@example.com"), ("msg-2", "bo@example.com")])

    async def scenario(client: Client) -> None:
        status, answer = await client.post(event("evt-1", "delivered", "msg-1", T0))
        assert (status, answer["result"], answer["updated"]) == (200, "stored", 1)
        assert await client.get("/healthz") == 200
        assert await client.get("/readyz") == 200

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, status, delivery_status, last_event_at FROM email_sends ORDER BY id"
        ).fetchall()
        stored = conn.execute("SELECT provider, event_id, matched FROM delivery_events").fetchall()
    assert rows == [
        (ids["msg-1"], "accepted", "delivered", T0),
        (ids["msg-2"], "accepted", None, None),
    ]
    assert stored == [("sandbox", "evt-1", True)]


def test_the_same_event_id_again_changes_nothing(database_url: str) -> None:
    seed(database_url, [("msg-1", "ana@example.com")])
    first = event("evt-1", "deferred", "msg-1", T0)

    async def scenario(client: Client) -> None:
        assert (await client.post(first))[0] == 200
        before = snapshot(database_url)
        status, answer = await client.post(first)
        assert (status, answer["result"]) == (200, "duplicate")
        # The same id with another body (newer, a complaint) is still the same event.
        other = event("evt-1", "complained", "msg-1", T0 + timedelta(hours=1))
        status, answer = await client.post(other)
        assert (status, answer["result"], answer["suppressed"]) == (200, "duplicate", 0)
        assert snapshot(database_url) == before
        # The same id from another provider is another event.
        status, answer = await client.post(other, provider="other")
        assert (status, answer["result"], answer["suppressed"]) == (200, "stored", 1)

    run(database_url, scenario)


def test_bad_signatures_and_stale_timestamps_are_401_and_change_nothing(
    database_url: str,
) -> None:
    seed(database_url, [("msg-1", "ana@example.com")])
    bounce = event("evt-1", "bounced", "msg-1", T0, bounce="hard")

    async def scenario(client: Client) -> None:
        before = snapshot(database_url)
        now = int(time.time())
        refused = [
            await client.post(bounce, secret="not-the-secret-0123"),
            await client.post(bounce, header=None),
            await client.post(bounce, header="t=123"),
            await client.post(bounce, header=signature_header(SECRET, SANDBOX, b"{}", now)),
            # A captured request, signature and all, replayed to another provider's path.
            await client.post(
                bounce, provider="other", header=signature_header(SECRET, SANDBOX, bounce, now)
            ),
            await client.post(bounce, t=now - 301),
            await client.post(bounce, t=now + 400),
            await client.post(b"not json at all", t=now - 3600),
        ]
        assert [status for status, _ in refused] == [401] * len(refused)
        assert "stale" not in json.dumps(refused[0][1])
        assert snapshot(database_url) == before
        # The same bytes, signed properly, are then taken: nothing was half-recorded.
        status, answer = await client.post(bounce)
        assert (status, answer["result"], answer["suppressed"]) == (200, "stored", 1)

    run(database_url, scenario)


def test_malformed_bodies_are_400_and_unknown_message_ids_are_stored(database_url: str) -> None:
    seed(database_url, [("msg-1", "ana@example.com")])

    async def scenario(client: Client) -> None:
        before = snapshot(database_url)
        for body in (
            b"{}",
            b"[1]",
            event("evt-x", "opened", "msg-1", T0),
            event("evt-x", "bounced", "msg-1", T0),  # a bounce without its kind
            b'{"id": "e", "type": "delivered", "message_id": "msg-1", "occurred_at": "soon"}',
        ):
            status, answer = await client.post(body)
            assert status == 400, answer
        assert (await client.post(b"x", provider="bad%20name"))[0] == 404
        huge = b'{"padding": "' + b"x" * 300_000 + b'"}'
        async with client.session.post(
            f"{client.url}/webhooks/sandbox",
            data=huge,
            headers={
                "Mailbus-Signature": signature_header(SECRET, SANDBOX, huge, int(time.time()))
            },
        ) as response:
            assert response.status == 413
        assert snapshot(database_url) == before
        status, answer = await client.post(event("evt-u", "bounced", "nope", T0, bounce="hard"))
        assert (status, answer) == (202, {"result": "unmatched", "updated": 0, "suppressed": 0})

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT event_id, matched FROM delivery_events").fetchall() == [
            ("evt-u", False)
        ]
        assert conn.execute("SELECT count(*) FROM email_suppressions").fetchone() == (0,)


def test_a_hard_bounce_suppresses_every_capitalisation_of_the_address(
    database_url: str,
) -> None:
    seed(
        database_url,
        [
            ("msg-1", "Ana.Smith@Example.COM"),
            ("msg-2", "bo@example.com"),
            ("msg-3", "Cy@Example.com"),
        ],
    )

    async def scenario(client: Client) -> None:
        hard = await client.post(event("e1", "bounced", "msg-1", T0, bounce="hard"))
        soft = await client.post(event("e2", "bounced", "msg-2", T0, bounce="soft"))
        complaint = await client.post(event("e3", "complained", "msg-3", T0))
        assert [answer["suppressed"] for _, answer in (hard, soft, complaint)] == [1, 0, 1]

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT address, reason, source FROM email_suppressions ORDER BY address"
        ).fetchall() == [
            ("ana.smith@example.com", "hard_bounce", "webhook:sandbox"),
            ("cy@example.com", "complaint", "webhook:sandbox"),
        ]
        assert conn.execute(
            "SELECT message_id, delivery_status FROM email_sends ORDER BY message_id"
        ).fetchall() == [("msg-1", "bounced"), ("msg-2", "bounced"), ("msg-3", "complained")]
        # A later mail to the address, in yet another case, is found suppressed by the
        # consumer's own load query (it ends `suppressed`, never sent).
        later = conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('later', 'ANA.SMITH@example.com', 't'), ('other', 'bo@example.com', 't')"
            " RETURNING id"
        ).fetchall()
    (later_id,), (other_id,) = later
    assert suppressed_at_load(database_url, [later_id, other_id]) == {
        later_id: True,
        other_id: False,
    }


def test_an_older_event_arriving_late_does_not_overwrite_a_newer_one(database_url: str) -> None:
    seed(database_url, [("msg-1", "a@example.com"), ("msg-2", "b@example.com")])
    t1, t2, t3 = T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=9)

    async def scenario(client: Client) -> None:
        assert (await client.post(event("a2", "delivered", "msg-1", t2)))[1]["updated"] == 1
        assert (await client.post(event("a1", "deferred", "msg-1", t1)))[1]["updated"] == 0
        # Same instant: the higher rank wins whatever the arrival order.
        assert (await client.post(event("b1", "bounced", "msg-2", t2, "soft")))[0] == 200
        assert (await client.post(event("b2", "delivered", "msg-2", t2)))[1]["updated"] == 0

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT message_id, delivery_status, last_event_at FROM email_sends ORDER BY id"
        ).fetchall()
        assert rows == [("msg-1", "delivered", t2), ("msg-2", "bounced", t2)]
        assert conn.execute("SELECT count(*) FROM delivery_events").fetchone() == (4,)

    async def newer(client: Client) -> None:
        assert (await client.post(event("a3", "complained", "msg-1", t3)))[1]["updated"] == 1

    run(database_url, newer)
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT delivery_status, last_event_at FROM email_sends WHERE message_id = 'msg-1'"
        ).fetchone() == ("complained", t3)


def test_ten_thousand_shuffled_events_with_duplicates_end_in_the_latest_state(
    database_url: str,
) -> None:
    """2,000 sends, 4 events each (some at the same instant), 2,000 duplicates: 10,000
    requests in random order, 32 at a time."""
    rng = random.Random(20261201)
    sends = [(f"m-{n}", f"User{n}@Example.com") for n in range(2000)]
    ids = seed(database_url, sends)
    unique: list[bytes] = []
    expected: dict[str, tuple[str, datetime]] = {}
    suppressed: set[str] = set()
    for message_id, address in sends:
        latest: tuple[datetime, int, str] | None = None
        for k in range(4):
            kind = rng.choice(STATUS_RANK)
            bounce = rng.choice(("hard", "soft")) if kind == "bounced" else None
            at = T0 + timedelta(seconds=rng.randrange(0, 6))  # collisions on purpose
            unique.append(event(f"{message_id}-e{k}", kind, message_id, at, bounce))
            key = (at, STATUS_RANK.index(kind), kind)
            latest = key if latest is None or key > latest else latest
            if kind == "complained" or bounce == "hard":
                suppressed.add(address.lower())
        assert latest is not None
        expected[message_id] = (latest[2], latest[0])
    requests = unique + rng.sample(unique, 2000)
    rng.shuffle(requests)
    assert len(requests) == 10_000

    async def scenario(client: Client) -> None:
        gate = asyncio.Semaphore(32)
        results: dict[str, int] = {}

        async def one(body: bytes) -> None:
            async with gate:
                status, answer = await client.post(body)
            assert status == 200, answer
            results[answer["result"]] = results.get(answer["result"], 0) + 1

        await asyncio.gather(*(one(body) for body in requests))
        assert results == {"stored": 8000, "duplicate": 2000}

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT message_id, delivery_status, last_event_at FROM email_sends"
        ).fetchall()
        addresses = {r[0] for r in conn.execute("SELECT address FROM email_suppressions")}
        assert conn.execute("SELECT count(*) FROM delivery_events").fetchone() == (8000,)
    assert len(rows) == len(ids)
    wrong = [row for row in rows if expected[row[0]] != (row[1], row[2])]
    assert wrong == []
    assert addresses == suppressed


def test_the_command_serves_until_sigterm_and_refuses_bad_configuration(
    database_url: str,
) -> None:
    seed(database_url, [("msg-1", "ana@example.com")])
    env = dict(os.environ, MAILBUS_DATABASE_URL=database_url, MAILBUS_LOG_LEVEL="WARNING")
    env.pop("MAILBUS_WEBHOOK_SECRET", None)
    env.pop("MAILBUS_WEBHOOK_SECRET_FILE", None)
    missing = run_mailbus("webhooks", env=env)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "mailbus: configuration error: MAILBUS_WEBHOOK_SECRET: must be set"
        " (or MAILBUS_WEBHOOK_SECRET_FILE)"
    ]
    bad_listen = run_mailbus(
        "webhooks", env={**env, "MAILBUS_WEBHOOK_SECRET": SECRET, "MAILBUS_WEBHOOK_LISTEN": "x"}
    )
    assert bad_listen.returncode == 2 and "MAILBUS_WEBHOOK_LISTEN" in bad_listen.stderr

    env.update(MAILBUS_WEBHOOK_SECRET=SECRET, MAILBUS_WEBHOOK_LISTEN="127.0.0.1:0")
    env.update(MAILBUS_LOG_LEVEL="INFO")  # where it listens is an INFO log line
    process = subprocess.Popen(
        [sys.executable, "-m", "mailbus", "webhooks"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # JSON log lines; the one saying where it listens
            listening = json.loads(line)
            if listening["msg"].startswith("mailbus webhooks listening on "):
                break
        assert listening["msg"].startswith("mailbus webhooks listening on http://127.0.0.1:")
        url = listening["url"]

        async def post() -> int:
            body = event("evt-1", "delivered", "msg-1", T0)
            headers = {
                "Mailbus-Signature": signature_header(SECRET, SANDBOX, body, int(time.time()))
            }
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"{url}/webhooks/sandbox", data=body, headers=headers) as response,
            ):
                return response.status

        assert asyncio.run(post()) == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert '"msg": "mailbus webhooks stopped"' in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT delivery_status FROM email_sends").fetchone() == ("delivered",)


def test_a_lone_surrogate_gets_a_400_of_its_own_and_its_batch_is_stored(
    database_url: str,
) -> None:
    """JSON may escape a lone surrogate (``"\\ud800"``); PostgreSQL's jsonb refuses it, so
    stored in a batch it failed every event of the batch with 503, on every retry."""
    seed(database_url, [("m-1", "a@example.com"), ("m-2", "b@example.com")])

    async def scenario(client: Client) -> None:
        answers = await asyncio.gather(
            client.post(event("e-1", "delivered", "m-1", T0)),
            client.post(event("e-\ud800", "delivered", "m-1", T0)),
            client.post(event("e-2", "delivered", "\udfff", T0)),
            client.post(event("e-3", "delivered", "m-2", T0)),
        )
        assert [status for status, _ in answers] == [200, 400, 400, 200]
        assert [answer.get("error", "")[:10] for _, answer in answers[1:3]] == [
            "id: is not",
            "message_id",
        ]

    run(database_url, scenario)
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT event_id FROM delivery_events ORDER BY event_id"
        ).fetchall() == [("e-1",), ("e-3",)]


def test_events_coalesced_into_one_batch_keep_their_meaning(database_url: str) -> None:
    """Submitted in one event-loop turn, these go to PostgreSQL as one statement."""
    seed(
        database_url,
        [("m-1", "a@example.com"), ("m-2", "Dup@Example.com"), ("m-3", "DUP@example.COM")],
    )
    t1, t2 = T0, T0 + timedelta(minutes=1)

    async def scenario() -> list[tuple[str, int, int]]:
        store = EventStore(database_url)
        await store.open()
        try:
            batch = [
                ("e1", "delivered", "m-1", t2, None),
                ("e2", "deferred", "m-1", t1, None),  # older, same batch
                ("e1", "delivered", "m-1", t2, None),  # repeat within the batch
                ("e3", "bounced", "m-2", t1, "hard"),
                ("e4", "complained", "m-3", t1, None),  # the same address, other case
                ("e5", "delivered", "unknown", t1, None),
            ]
            events = [
                parse_event(event(i, kind, m, at, bounce)) for i, kind, m, at, bounce in batch
            ]
            results = await asyncio.gather(*(store.record("p", e) for e in events))
        finally:
            await store.close()
        return [(r.result, r.updated, r.suppressed) for r in results]

    assert asyncio.run(scenario()) == [
        ("stored", 1, 0),
        ("stored", 0, 0),
        ("duplicate", 0, 0),
        ("stored", 1, 1),
        ("stored", 1, 0),  # its address was suppressed by e3 in the same statement
        ("unmatched", 0, 0),
    ]
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT message_id, delivery_status, last_event_at FROM email_sends ORDER BY id"
        ).fetchall() == [
            ("m-1", "delivered", t2),
            ("m-2", "bounced", t1),
            ("m-3", "complained", t1),
        ]
        assert conn.execute("SELECT address, reason FROM email_suppressions").fetchall() == [
            ("dup@example.com", "hard_bounce")
        ]
        assert conn.execute("SELECT count(*) FROM delivery_events").fetchone() == (5,)


def test_a_storage_failure_is_503_and_the_retry_is_recorded(database_url: str) -> None:
    seed(database_url, [("msg-1", "ana@example.com")])
    body = event("evt-1", "bounced", "msg-1", T0, bounce="hard")

    def rename(old: str, new: str) -> None:
        with psycopg.connect(database_url) as conn:
            conn.execute(f"ALTER TABLE {old} RENAME TO {new}")

    async def scenario(client: Client) -> None:
        rename("delivery_events", "delivery_events_away")
        try:
            async with client.session.post(
                f"{client.url}/webhooks/sandbox",
                data=body,
                headers={
                    "Mailbus-Signature": signature_header(SECRET, SANDBOX, body, int(time.time()))
                },
            ) as response:
                assert response.status == 503
                assert response.headers["Retry-After"] == "5"
        finally:
            rename("delivery_events_away", "delivery_events")
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT delivery_status FROM email_sends").fetchone() == (None,)
            assert conn.execute("SELECT count(*) FROM email_suppressions").fetchone() == (0,)
        status, answer = await client.post(body)  # the sender's retry
        assert (status, answer["result"], answer["suppressed"]) == (200, "stored", 1)

    run(database_url, scenario)


def test_events_that_came_before_the_message_id_are_applied_by_the_sweep(
    database_url: str,
) -> None:
    """The provider's first event can race the consumer's settle of `accepted`."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status) VALUES"
            " ('a', 'Early@Example.com', 't', 'sending'), ('b', 'b@example.com', 't', 'sending')"
        )
    t1, t2 = T0, T0 + timedelta(minutes=1)

    async def scenario() -> None:
        store = EventStore(database_url)
        await store.open()
        server = await start(store, SECRET, port=0, sweep_s=0.2)
        try:
            async with aiohttp.ClientSession() as session:
                client = Client(session, server)
                for body in (
                    event("e1", "deferred", "late-a", t1),
                    event("e2", "bounced", "late-a", t2, "hard"),
                    event("e3", "delivered", "late-b", t1),
                ):
                    assert (await client.post(body))[0] == 202
                # `b` takes a newer event in the meantime; e3 must not overwrite it.
                with psycopg.connect(database_url) as conn:
                    conn.execute(
                        "UPDATE email_sends"
                        " SET status = 'accepted', message_id = 'late-' || dedupe_key"
                    )
                assert (await client.post(event("e4", "complained", "late-b", t2)))[0] == 200
                for _ in range(100):
                    await asyncio.sleep(0.1)
                    with psycopg.connect(database_url) as conn:
                        row = conn.execute(
                            "SELECT count(*) FROM delivery_events WHERE NOT matched"
                        ).fetchone()
                    if row == (0,):
                        break
                assert row == (0,)
            assert (await store.apply_late_events()).applied == 0  # nothing left twice
        finally:
            await server.stop()
            await store.close()

    asyncio.run(scenario())
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT dedupe_key, delivery_status, last_event_at FROM email_sends ORDER BY id"
        ).fetchall() == [("a", "bounced", t2), ("b", "complained", t2)]
        assert conn.execute(
            "SELECT address, reason FROM email_suppressions ORDER BY address"
        ).fetchall() == [("b@example.com", "complaint"), ("early@example.com", "hard_bounce")]
