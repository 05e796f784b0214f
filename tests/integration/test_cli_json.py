"""`--json` of `migrate` (with `--status`/`--dry-run`), `retention run` (with
`--dry-run`), `retention floors` and `dlq replay` (with `--dry-run`) on the real
PostgreSQL: each prints one document on stdout in the shape docs/reference/cli.md#json-documents
gives, and nothing else; a run that ends refused says so as JSON on stderr with its exit
status. (Their errors as JSON, unreachable and misconfigured, for every `--json` command:
tests/unit/test_exit_codes.py.)"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from cli_support import seed_dead_letters
from services import run_mailbus, settings_env

from mailbus.app.migrate import available_migrations
from mailbus.consumer.retention import TABLES, Windows
from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack

VERSIONS = [m.version for m in available_migrations()]
OLD = "now() - interval '91 days'"  # past the default window of 90 days


def _document(settings: Settings, *args: str, code: int = 0) -> Any:
    run = run_mailbus(*args, "--json", env=settings_env(settings), timeout=60)
    assert run.returncode == code, run.stderr
    if code == 0:
        assert run.stderr == "", run.stderr
    return json.loads(run.stdout)


def test_migrate_says_its_plan_and_its_run_as_json(settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as conn:  # as the previous release left it
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version > %s", (VERSIONS[-3],))
    last_two = [m for m in available_migrations()][-2:]
    for flag in ("--status", "--dry-run"):
        plan = _document(settings, "migrate", flag, "--max-wait", "20")
        assert set(plan) == {
            "dry_run", "database_version", "build_version", "applied", "pending",
            "lock_timeout_s", "max_wait_s", "roles",
        }  # fmt: skip
        assert plan["dry_run"] is (flag == "--dry-run")
        assert (plan["database_version"], plan["build_version"]) == (VERSIONS[-3], VERSIONS[-1])
        assert plan["applied"] == VERSIONS[:-2]
        assert plan["pending"] == [
            {"version": m.version, "name": m.label, "online": m.online,
             "locking": m.locking, "plan": m.plan}
            for m in last_two
        ]  # fmt: skip
        assert (plan["lock_timeout_s"], plan["max_wait_s"], plan["roles"]) == (0.05, 20.0, False)

    run = _document(settings, "migrate", "--skip-topics")
    assert run == {
        "applied": VERSIONS[-2:], "roles": None, "topics_created": None, "schema_registry": None,
    }  # fmt: skip
    again = _document(settings, "migrate")  # its topics exist: the settings fixture made them
    assert again == {"applied": [], "roles": None, "topics_created": [], "schema_registry": None}
    assert _document(settings, "migrate", "--status")["pending"] == []


def _old_sends(database_url: str, count: int) -> None:
    with psycopg.connect(database_url) as conn:
        for n in range(count):
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts,"
                f" created_at, updated_at) VALUES (%s, 'a@x.org', 't', 'accepted', 1, {OLD},"
                f" {OLD})",
                (f"old-{n}",),
            )


def test_retention_says_what_it_would_delete_what_it_deleted_and_its_floors_as_json(
    settings: Settings,
) -> None:
    _old_sends(settings.database_url, 3)
    tables = [table for table, _ in TABLES]
    windows = {table: Windows.of(settings).of_table(table) for table in tables}

    dry = _document(settings, "retention", "run", "--dry-run")
    assert dry["dry_run"] is True
    assert dry["window_s"] == windows
    assert dry["would_delete"]["sends"] == 3

    behind = run_mailbus(
        "retention", "run", "--batch", "2", "--budget", "0s", "--json",
        env=settings_env(settings),
    )  # fmt: skip
    assert behind.returncode == 3, behind.stderr  # spent its budget still behind: refused
    run = json.loads(behind.stdout)  # what it did, as a caught-up run says it
    assert run["deleted"]["sends"] == {"rows": 2, "batches": 1}
    assert (run["caught_up"], run["budget_s"], run["behind_rows"]) == (False, 0.0, 1)
    assert run["overdue_s"] == pytest.approx(86400, abs=600)
    error = json.loads(behind.stderr)["error"]
    assert (error["kind"], error["exit"]) == ("refused", 3)
    assert "still behind: 1 rows past their window" in error["message"]

    done = _document(settings, "retention", "run")
    assert set(done) == {
        "dry_run", "window_s", "deleted", "caught_up", "budget_s", "behind_rows", "overdue_s",
    }  # fmt: skip
    assert done["deleted"]["sends"] == {"rows": 1, "batches": 1}
    assert (done["caught_up"], done["behind_rows"], done["overdue_s"]) == (True, 0, None)

    floors = _document(settings, "retention", "floors")
    assert floors["set"] is False
    assert list(floors["floor_s"]) == tables
    assert all(isinstance(seconds, int | float) for seconds in floors["floor_s"].values())


def test_dlq_replay_says_what_it_would_replay_and_what_it_replayed_as_json(
    settings: Settings,
) -> None:
    seed_dead_letters(settings.database_url, 3)
    dry = _document(settings, "dlq", "replay", "--dry-run")
    assert set(dry) == {"dry_run", "would_replay", "would_skip"}
    assert dry["dry_run"] is True and dry["would_skip"] == {}
    assert [x["dedupe_key"] for x in dry["would_replay"]] == [
        f"order-{n}-shipped" for n in range(3)
    ]  # the rows of `dlq list --json`
    assert set(dry["would_replay"][0]) == set(_document(settings, "dlq", "list")[0])

    done = _document(settings, "dlq", "replay", "--no-pace", "--why", "json test")
    assert done == {"dry_run": False, "replayed": 3, "skipped": {}, "left": 0}
    again = _document(settings, "dlq", "replay", "--no-pace")
    assert again == {"dry_run": False, "replayed": 0, "skipped": {}, "left": 0}
