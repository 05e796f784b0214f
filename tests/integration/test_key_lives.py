"""A dedupe key enqueued again after retention is its next life
(docs/retention.md#a-key-enqueued-again): `mailbus retention run`, as the least-privilege
role, counts the deleted key's lives; the consumer's load gives the new row the key `K~2`,
its first claim records the key it sends, and `mailbus send show` prints it. Real
PostgreSQL, no provider."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from services import run_mailbus, settings_env
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.ledger import SendLedger
from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack

ENQUEUE = (  # docs/reference/contract.md#database, as a domain service writes it
    "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
    " VALUES (%s, 'a@x.org', 't', '{}', 'p1') ON CONFLICT (dedupe_key) DO NOTHING"
)


@pytest.fixture
def retention_url(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_retention") as url:
        yield url


def enqueue(database_url: str, key: str) -> int:
    with psycopg.connect(database_url) as conn:
        conn.execute(ENQUEUE, (key,))
        row = conn.execute("SELECT id FROM email_sends WHERE dedupe_key = %s", (key,)).fetchone()
    assert row is not None
    return int(row[0])


def settle_long_ago(database_url: str, send_id: int) -> None:
    """The row accepted, 91 days ago: past the default window."""
    with psycopg.connect(database_url) as conn:
        conn.execute("ALTER TABLE email_sends DISABLE TRIGGER email_sends_touch")
        conn.execute(
            "UPDATE email_sends SET status = 'accepted', message_id = 'm-' || id,"
            " updated_at = now() - interval '91 days' WHERE id = %s",
            (send_id,),
        )
        conn.execute("ALTER TABLE email_sends ENABLE TRIGGER email_sends_touch")


def retention(url: str) -> None:
    run = run_mailbus("retention", "run", env={"MAILBUS_DATABASE_URL": url})
    assert run.returncode == 0, run.stderr


def with_prefix(database_url: str, prefix: str, scenario: Any) -> Any:
    async def main() -> Any:
        ledger = SendLedger(database_url, max_connections=2, lease_s=30, key_prefix=prefix)
        await ledger.open()
        try:
            return await scenario(ledger)
        finally:
            await ledger.close()

    return asyncio.run(main())


def loaded_key(database_url: str, send_id: int, prefix: str = "") -> str:
    """The key the consumer's ledger loads the row with."""

    async def load(ledger: SendLedger) -> str:
        loaded = await ledger.load(send_id)
        assert loaded is not None
        return loaded.view.key

    return str(with_prefix(database_url, prefix, load))


def sent_key(database_url: str, send_id: int, prefix: str = "") -> tuple[str, str | None]:
    """The key the consumer loads the row with and claims it under, and what the claim
    recorded."""

    async def send(ledger: SendLedger) -> str:
        loaded = await ledger.load(send_id)
        assert loaded is not None
        key = loaded.view.key
        claim = await ledger.claim_for_send(send_id, 0, None, uuid.uuid4(), provider_key=key)
        assert claim is not None
        return key

    key = with_prefix(database_url, prefix, send)
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT provider_key FROM email_sends WHERE id = %s", (send_id,)
        ).fetchone()
    assert row is not None
    return key, row[0]


def test_each_life_of_a_key_gets_a_key_of_its_own(database_url: str, retention_url: str) -> None:
    first = enqueue(database_url, "order-7")
    assert sent_key(database_url, first) == ("order-7", "order-7")  # the contract: the key
    settle_long_ago(database_url, first)
    retention(retention_url)

    second = enqueue(database_url, "order-7")
    assert second != first
    assert sent_key(database_url, second) == ("order-7~2", "order-7~2")
    settle_long_ago(database_url, second)
    retention(retention_url)

    third = enqueue(database_url, "order-7")
    assert sent_key(database_url, third, prefix="prod:") == ("prod:order-7~3", "prod:order-7~3")
    with psycopg.connect(database_url) as conn:
        lives = conn.execute("SELECT dedupe_key, lives FROM email_key_lives").fetchall()
    assert lives == [("order-7", 2)]


def test_a_row_deleted_by_hand_counts_a_life_too(database_url: str) -> None:
    """Whoever deletes the row (here the tables' owner, not the retention command), the
    key enqueued again is its next life."""
    first = enqueue(database_url, "invoice-3")
    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM email_sends WHERE id = %s", (first,))
        conn.execute("DELETE FROM email_sends WHERE false")  # a statement deleting nothing
    assert loaded_key(database_url, enqueue(database_url, "invoice-3")) == "invoice-3~2"


def test_the_first_claims_key_is_kept(database_url: str) -> None:
    """A row in doubt is looked up and resent under the key it went out under, even after
    the deployment's prefix changed."""
    send_id = enqueue(database_url, "code-1")
    assert sent_key(database_url, send_id, prefix="old:") == ("old:code-1", "old:code-1")

    assert loaded_key(database_url, send_id, prefix="new:") == "old:code-1"


def test_a_row_tried_before_the_key_was_recorded_keeps_its_bare_key(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO email_key_lives (dedupe_key, lives) VALUES ('k', 1)")
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts)"
            " VALUES ('k', 'a@x.org', 't', 'unknown', 1)"
        )
        (send_id,) = conn.execute("SELECT id FROM email_sends").fetchone()  # type: ignore[misc]

    assert loaded_key(database_url, send_id, prefix="new:") == "k"  # what an older build sent


def test_send_show_prints_the_provider_key_and_the_life(
    settings: Settings, retention_url: str
) -> None:
    env = settings_env(settings, MAILBUS_PROVIDER_KEY_PREFIX="stg:")
    first = enqueue(settings.database_url, "order-9")
    settle_long_ago(settings.database_url, first)
    retention(retention_url)

    gone = run_mailbus("send", "show", "order-9", env=env)
    assert gone.returncode != 0
    assert "retention deleted its 1 earlier" in gone.stderr + gone.stdout

    enqueue(settings.database_url, "order-9")
    shown = run_mailbus("send", "show", "order-9", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "provider_key: stg:order-9~2" in shown.stdout
    assert "key_life: 2" in shown.stdout
    as_json = json.loads(run_mailbus("send", "show", "order-9", "--json", env=env).stdout)
    assert (as_json["send"]["provider_key"], as_json["send"]["key_life"]) == ("stg:order-9~2", 2)


@pytest.mark.parametrize(
    ("group", "statement"),
    [
        ("mailbus_consumer", "INSERT INTO email_key_lives (dedupe_key, lives) VALUES ('x', 9)"),
        ("mailbus_consumer", "UPDATE email_key_lives SET lives = 9"),
        ("mailbus_enqueuer", "SELECT lives FROM email_key_lives"),
        ("mailbus_webhooks", "UPDATE email_key_lives SET lives = 9"),
        ("mailbus_operator", "DELETE FROM email_key_lives"),
        ("mailbus_retention", "DELETE FROM email_key_lives"),
        ("mailbus_retention", "SELECT to_address FROM email_sends"),
    ],
)
def test_only_retention_counts_lives_and_nobody_forgets_them(
    database_url: str, group: str, statement: str
) -> None:
    """A life gone missing would give a new mail an old key, which the provider answers
    with the old mail's id: no role but retention writes the table, none deletes from it."""
    apply_roles(database_url)
    with (
        login_as(database_url, group) as url,
        psycopg.connect(url) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


def test_a_claim_under_another_key_than_the_recorded_one_is_refused(database_url: str) -> None:
    """Two consumers of different prefixes during a rollout that changes it: the new one
    loads the row (key `new:K`); the old one claims it first (recording `old:K`) and hands
    the claim back before its call (release_claim). The new one's claim then went through
    and its call carried `new:K` while the row said `old:K`: a look-up or resend of that
    row would ask under a key the provider never saw. The claim is refused instead; the
    next load (the relay publishes the released row again) carries the recorded key."""
    send_id = enqueue(database_url, "code-9")

    async def race(new: SendLedger) -> Any:
        loaded = await new.load(send_id)
        assert loaded is not None and loaded.view.key == "new:code-9"

        async def first(old: SendLedger) -> None:
            token = uuid.uuid4()
            claim = await old.claim_for_send(send_id, 0, None, token, provider_key="old:code-9")
            assert claim is not None
            await old.release_claim(send_id, token)

        old = SendLedger(database_url, max_connections=2, lease_s=30, key_prefix="old:")
        await old.open()
        try:
            await first(old)
        finally:
            await old.close()
        return await new.claim_for_send(
            send_id, 0, None, uuid.uuid4(), provider_key=loaded.view.key
        )

    assert with_prefix(database_url, "new:", race) is None
    assert loaded_key(database_url, send_id, prefix="new:") == "old:code-9"
