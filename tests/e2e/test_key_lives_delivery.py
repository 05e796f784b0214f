"""The key the provider sees, end to end (docs/providers.md#the-key-the-provider-sees): a
dedupe key enqueued again after `mailbus retention run` deleted its row reaches the
provider as a second mail, and two deployments on one provider account never share a key.
Real relay and consumer processes, the sandbox as the provider (it remembers every key it
accepted, as the contract's provider does), retention as its least-privilege role."""

from __future__ import annotations

import asyncio

import psycopg
from e2e_stack import Stack
from services import run_mailbus
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.consumer.core.outcome import Outcome, classify
from mailbus.consumer.provider import HttpProvider, OutgoingMail
from mailbus.kernel.provider_key import provider_key

ENQUEUE = (  # docs/reference/contract.md#database, as a domain service writes it
    "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, priority)"
    " VALUES (%s, 'ana@example.com', 'welcome', '{}', 'p0') ON CONFLICT (dedupe_key) DO NOTHING"
)


def enqueue(stack: Stack, key: str) -> None:
    stack.query(ENQUEUE + " RETURNING id", key)


def accepted(stack: Stack) -> dict[str, tuple[int, str]]:
    return {k: (v["accepted"], v["id"]) for k, v in stack.ledger()["keys"].items() if v["accepted"]}


def age_past_retention(stack: Stack) -> None:
    """Two days pass for the settled rows (the window below is one day)."""
    with psycopg.connect(stack.settings.database_url) as conn:
        conn.execute("ALTER TABLE email_sends DISABLE TRIGGER email_sends_touch")
        conn.execute(
            "UPDATE email_sends SET updated_at = now() - interval '2 days'"
            " WHERE status = 'accepted'"
        )
        conn.execute("ALTER TABLE email_sends ENABLE TRIGGER email_sends_touch")


def test_a_key_enqueued_again_after_retention_reaches_the_provider_as_a_second_mail(
    stack: Stack,
) -> None:
    stack.start_relay()
    stack.start_consumer()
    enqueue(stack, "order-1042-confirmation")
    assert stack.wait_settled(30) == {"accepted": 1}
    ((first_id,),) = stack.query("SELECT message_id FROM email_sends")

    # retention as docs/retention.md says to run it: a login role of mailbus_retention
    age_past_retention(stack)
    apply_roles(stack.settings.database_url)
    # a one-day window, allowed once the intake's replay horizon is shorter (no intake here),
    # pinned as the database's floor by the tables' owner
    windows = {"MAILBUS_RETENTION": "1d", "MAILBUS_INTAKE_MAX_AGE": "1h"}
    pinned = run_mailbus("retention", "floors", "--set", env=stack.env(**windows))
    assert pinned.returncode == 0, pinned.stderr
    with login_as(stack.settings.database_url, "mailbus_retention") as url:
        run = run_mailbus("retention", "run", env=stack.env(MAILBUS_DATABASE_URL=url, **windows))
    assert run.returncode == 0, run.stderr
    assert "sends 1 deleted" in run.stdout, run.stdout
    assert stack.query("SELECT count(*) FROM email_sends") == [(0,)]

    enqueue(stack, "order-1042-confirmation")
    assert stack.wait_settled(30) == {"accepted": 1}
    ((second_id, sent_key),) = stack.query("SELECT message_id, provider_key FROM email_sends")
    assert sent_key == "order-1042-confirmation~2"
    assert second_id != first_id  # a new mail, not the old mail's id
    assert accepted(stack) == {
        "order-1042-confirmation": (1, first_id),
        "order-1042-confirmation~2": (1, second_id),
    }
    stack.assert_table_agrees_with_providers()


def test_two_deployments_on_one_provider_account_never_share_a_key(stack: Stack) -> None:
    """Staging (no prefix, say an older install) already sent `order-7` to the account;
    production, with MAILBUS_PROVIDER_KEY_PREFIX, sends its own `order-7` as a mail of its
    own instead of being answered with staging's id."""

    async def staging_sends() -> str | None:
        provider = HttpProvider(stack.sandbox.url, "e2e-secret-key-0123456789", 1, 2, 2)
        try:
            mail = OutgoingMail(provider_key("", "order-7", 1), "bo@example.com", "welcome", {})
            result = classify(await provider.send(mail))
        finally:
            await provider.aclose()
        assert result.outcome is Outcome.ACCEPTED, result
        return result.message_id

    staging_id = asyncio.run(staging_sends())
    stack.start_relay()
    stack.start_consumer(MAILBUS_PROVIDER_KEY_PREFIX="prod:")
    enqueue(stack, "order-7")
    assert stack.wait_settled(30) == {"accepted": 1}
    ((production_id, sent_key),) = stack.query("SELECT message_id, provider_key FROM email_sends")
    assert sent_key == "prod:order-7"
    assert production_id != staging_id
    assert accepted(stack) == {"order-7": (1, staging_id), "prod:order-7": (1, production_id)}
    stack.assert_table_agrees_with_providers(key_prefix="prod:")
