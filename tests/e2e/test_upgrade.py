"""An upgrade with mail in flight (docs/runbook.md#upgrades): rows left by the previous
release's processes on the previous release's schema — pending, one `sending` whose holder
died after the provider accepted it, one `unknown` — then `mailbus migrate`, then this
build's relay and consumer finish them: each key accepted once, and the table agrees with
the provider."""

from __future__ import annotations

import json
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from conftest import API_KEY, Stack
from services import StackServices, database_url_for, run_mailbus

from mailbus.app.migrate import available_migrations
from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import Settings
from mailbus.sandbox.server import start_in_thread

pytestmark = pytest.mark.stack

PREVIOUS = 23  # the last migration of the release before retention (0027, 0028) and later


def previous_release_database(services: StackServices, name: str) -> str:
    url = database_url_for(services.database_url, name)
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE mailbus_schema_migrations (version int PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in available_migrations():
            if migration.version <= PREVIOUS:
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO mailbus_schema_migrations VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
    return url


def accept_at_provider(sandbox_url: str, key: str) -> str:
    """The call the previous release's consumer made before it died."""
    request = urllib.request.Request(
        f"{sandbox_url}/v1/send",
        data=json.dumps({"to": f"{key}@example.com", "template": "welcome"}).encode(),
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return str(json.load(reply)["id"])


def test_mail_in_flight_across_an_upgrade_is_accepted_once(
    services: StackServices, settings: Settings, tmp_path: Path
) -> None:
    name = f"mailbus_upgrade_{uuid.uuid4().hex[:8]}"
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1)
    stack = Stack(
        replace(settings, database_url=database_url_for(settings.database_url, name)),
        sandbox,
        tmp_path,
    )
    try:
        url = previous_release_database(services, name)
        keys = stack.seed(6, prefix="pending")
        taken_id = accept_at_provider(sandbox.url, "in-call")
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
                " lease_until, first_tried_at) VALUES"
                " ('in-call', 'in-call@example.com', 'welcome', 'sending', 1,"
                "  now() - interval '1 minute', now() - interval '2 minutes'),"
                " ('in-doubt', 'in-doubt@example.com', 'welcome', 'unknown', 1,"
                "  NULL, now() - interval '2 minutes')"
            )
        behind = run_mailbus("relay", env=stack.env(), timeout=60)
        assert behind.returncode == 2 and "run `mailbus migrate`" in behind.stderr

        migrated = run_mailbus("migrate", "--skip-topics", env=stack.env(), timeout=120)
        assert migrated.returncode == 0, migrated.stderr
        newer = [m.version for m in available_migrations() if m.version > PREVIOUS]
        assert f"applied {newer}" in migrated.stdout

        stack.start_relay()
        stack.start_consumer()
        assert stack.wait_settled(90) == {"accepted": len(keys) + 2}
        stack.stop_all()
        assert stack.query("SELECT message_id FROM email_sends WHERE dedupe_key = 'in-call'") == [
            (taken_id,)
        ]
        assert stack.accepted_twice() == []
        stack.assert_table_agrees_with_providers()
    finally:
        stack.stop_all()
        sandbox.stop()
        drop_database(services.database_url, name)
