"""A process refuses a database behind its build with one line; `migrate --status` and
`--dry-run` say what is applied and pending and change nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from services import StackServices, database_url_for, run_mailbus, settings_env

from mailbus.app.migrate import available_migrations
from mailbus.app.scratch_database import drop_database
from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack

VERSIONS = [m.version for m in available_migrations()]
BUILD = VERSIONS[-1]
BEHIND = VERSIONS[-3]  # the database with the build's last two migrations not applied


@pytest.fixture
def empty_database(services: StackServices) -> Iterator[str]:
    name = f"mailbus_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield database_url_for(services.database_url, name)
    drop_database(services.database_url, name)


def _forget_last_two(database_url: str) -> None:
    """The database as the previous release left it, as far as the version check sees."""
    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM mailbus_schema_migrations WHERE version > %s", (BEHIND,))


def _recorded(database_url: str) -> list[int]:
    with psycopg.connect(database_url) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM mailbus_schema_migrations")]


@pytest.mark.parametrize("command", [["relay"], ["consume", "--priority", "p0"], ["status"]])
def test_a_process_on_a_database_behind_the_build_exits_2_with_one_line(
    settings: Settings, command: list[str]
) -> None:
    _forget_last_two(settings.database_url)
    run = run_mailbus(*command, env=settings_env(settings), timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        f"mailbus: configuration error: MAILBUS_DATABASE_URL: database at {BEHIND},"
        f" this build needs {BUILD}: run `mailbus migrate`"
    ]


def test_relay_on_an_unmigrated_database_says_to_migrate(
    settings: Settings, empty_database: str
) -> None:
    env = settings_env(settings, MAILBUS_DATABASE_URL=empty_database)
    run = run_mailbus("relay", env=env, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    want = f"database at 0, this build needs {BUILD}: run `mailbus migrate`"
    assert run.stderr.strip().endswith(want)


def test_status_and_dry_run_show_pending_and_apply_nothing(settings: Settings) -> None:
    _forget_last_two(settings.database_url)
    env = settings_env(settings)
    pending = [f"{m.version:04d}_{m.name}" for m in available_migrations()][-2:]
    for flag in ("--status", "--dry-run"):
        run = run_mailbus("migrate", flag, env=env, timeout=60)
        assert run.returncode == 0, run.stderr
        assert f"schema: database at {BEHIND}, this build at {BUILD}" in run.stdout
        assert "applied: 1-" in run.stdout
        assert f"pending: {', '.join(pending)}" in run.stdout
    assert f"would apply: {', '.join(pending)}" in run.stdout
    assert sorted(_recorded(settings.database_url)) == VERSIONS[:-2]
    run = run_mailbus("migrate", "--skip-topics", env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    status = run_mailbus("migrate", "--status", env=env, timeout=60)
    assert "pending: nothing (up to date)" in status.stdout
    assert run_mailbus("status", env=env, timeout=60).returncode == 0
