"""No command prints a secret (issue 34, review 2026-12-06-providers #12): every command
that prints runs with every secret setting configured, and a provider URL recorded with
credentials (before settings refused them), and its output is searched for them."""

from __future__ import annotations

import base64
from pathlib import Path

import psycopg
import pytest
from services import run_mailbus, settings_env

from mailbus.kernel.settings import Settings

URL_KEY = "key-url-userinfo-0123456789"
SECRETS = {
    "MAILBUS_PROVIDER_API_KEY": "provider-api-key-0123456789",
    "MAILBUS_FALLBACK_PROVIDER_API_KEY": "fallback-api-key-0123456789",
    "MAILBUS_WEBHOOK_SECRET": "webhook-secret-0123456789",
    "MAILBUS_UNSUBSCRIBE_SECRET": "unsubscribe-secret-0123456789",
    "MAILBUS_MAILGUN_WEBHOOK_KEY": "mailgun-webhook-key-0123456789",
    "MAILBUS_POSTMARK_WEBHOOK_AUTH": "hooks:postmark-pass-0123456789",
    "MAILBUS_RESEND_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"resend-0123456789").decode(),
    "MAILBUS_SES_ACCESS_KEY_ID": "AKIASESKEYID0123456789",
    "MAILBUS_SES_SECRET_ACCESS_KEY": "ses-secret-access-key-0123456789",
    "MAILBUS_SMTP_PASSWORD": "smtp-password-0123456789",
    "MAILBUS_SCHEMA_REGISTRY_AUTH": "registry:auth-0123456789",
}
COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("send", "show", "k-secret"),
    ("dlq", "list"),
    ("migrate", "--status"),
    ("suppress", "list"),
    ("campaign", "list", "--json"),
    ("retention", "run", "--dry-run"),
    ("--version",),
]


def seed(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO provider_health (process, provider, state, changed_at, updated_at)"
            " VALUES ('c-1', %s, 'closed', now(), now())",
            (f"https://api:{URL_KEY}@127.0.0.1:9/v3",),
        )
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, status)"
            " VALUES ('k-secret', 'ana@example.com', 't', 'pending')"
        )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_no_command_prints_a_configured_secret(
    settings: Settings, tmp_path: Path, command: tuple[str, ...]
) -> None:
    seed(settings.database_url)
    env = settings_env(settings, **SECRETS)
    done = run_mailbus(*command, env=env)
    printed = done.stdout + done.stderr
    assert done.returncode in (0, 1), printed  # ran (1: nothing to do / not found)
    for value in [*SECRETS.values(), URL_KEY]:
        assert value not in printed, (command, value)


def test_a_provider_url_with_credentials_exits_2_naming_the_setting(settings: Settings) -> None:
    env = settings_env(
        settings,
        MAILBUS_PROVIDER="mailgun",
        MAILBUS_MAILGUN_DOMAIN="mg.example.com",
        MAILBUS_MAIL_FROM="shop@example.com",
        MAILBUS_PROVIDER_URL=f"https://api:{URL_KEY}@127.0.0.1:9",
    )
    done = run_mailbus("status", "--json", env=env)
    assert done.returncode == 2
    assert "MAILBUS_PROVIDER_URL" in done.stderr
    assert URL_KEY not in done.stdout + done.stderr
