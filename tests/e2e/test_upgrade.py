"""An upgrade with mail in flight (docs/runbook.md#upgrades).

- The previous release itself, from this repository's history: its `migrate`, relay and
  consumer deliver until SIGKILLed mid-flight; this build's `migrate` and processes finish
  the rest.
- Rows as the release before retention left them on its schema — pending, one `sending`
  whose holder died after the provider accepted it, one `unknown` — finished the same way.

Each ends with every key accepted once and the table agreeing with the provider."""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from e2e_stack import API_KEY, Stack
from relay_runner import wait_until
from services import REPO, StackServices, database_url_for, run_mailbus

from mailbus.app.migrate import available_migrations
from mailbus.app.scratch_database import drop_database, schema_as_of
from mailbus.kernel.settings import Settings
from mailbus.sandbox.server import start_in_thread

pytestmark = pytest.mark.stack

PREVIOUS = 23  # the last migration of the release before retention (0027, 0028) and later
# The previous release: main as stop 24 landed it (CI passed), migrations up to 0031.
PREVIOUS_RELEASE = "b2ec55d591f7e78091244d5121f21dca39ade7b4"


@contextmanager
def empty_database_stack(
    services: StackServices, settings: Settings, tmp_path: Path
) -> Iterator[Stack]:
    """A stack on a new, empty database of its own and a sandbox; both gone afterwards."""
    name = f"mailbus_upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    sandbox = start_in_thread(port=0, api_key=API_KEY, seed=1)
    stack = Stack(
        replace(settings, database_url=database_url_for(settings.database_url, name)),
        sandbox,
        tmp_path,
    )
    try:
        yield stack
    finally:
        stack.stop_all()
        sandbox.stop()
        drop_database(services.database_url, name)


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
    with empty_database_stack(services, settings, tmp_path) as stack:
        url = stack.settings.database_url
        schema_as_of(url, PREVIOUS)
        keys = stack.seed(6, prefix="pending")
        taken_id = accept_at_provider(stack.sandbox.url, "in-call")
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


def previous_release_build(tmp_path: Path) -> tuple[Path, int]:
    """The previous release's tree from this repository's history, and its last migration."""
    tree = tmp_path / "previous-release"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"the previous release {PREVIOUS_RELEASE[:7]} is not in this clone's history:"
        f" {archive.stderr.decode().strip()}"
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    last = max(int(path.name[:4]) for path in (tree / "schemas" / "sql").glob("[0-9]*.sql"))
    return tree, last


def test_the_previous_release_killed_mid_flight_is_finished_by_this_build(
    services: StackServices, settings: Settings, tmp_path: Path
) -> None:
    previous, previous_version = previous_release_build(tmp_path)
    newer = [m.version for m in available_migrations() if m.version > previous_version]
    assert newer, "this build adds no migration: point PREVIOUS_RELEASE at the last release"
    with empty_database_stack(services, settings, tmp_path) as stack:
        old_migrate = run_mailbus("migrate", env=stack.env(), timeout=120, build=previous)
        assert old_migrate.returncode == 0, old_migrate.stderr
        keys = stack.seed(400)
        stack.set_faults(latency_ms=100)  # calls in flight when the SIGKILLs come
        stack.start("old-relay", "relay", build=previous)
        stack.start("old-consumer", "consume", "--priority", "p0,p1,p2", build=previous)
        wait_until(lambda: stack.statuses()["accepted"] >= 50, 60, "the old release delivering")
        stack.kill("old-consumer")
        stack.kill("old-relay")
        left = stack.statuses()
        assert left["accepted"] < len(keys), "the previous release finished before the SIGKILL"

        behind = run_mailbus("relay", env=stack.env(), timeout=60)
        assert behind.returncode == 2 and "run `mailbus migrate`" in behind.stderr
        migrated = run_mailbus("migrate", env=stack.env(), timeout=120)
        assert migrated.returncode == 0, migrated.stderr
        assert f"applied {newer}" in migrated.stdout

        stack.set_faults()
        stack.start_relay()
        stack.start_consumer()
        assert stack.wait_settled(90) == {"accepted": len(keys)}
        stack.stop_all()
        print(f"the previous release left {dict(left)}; this build finished them")
        assert stack.accepted_twice() == []
        stack.assert_table_agrees_with_providers()
