"""A process refuses a database behind its build with one line; `migrate --status` and
`--dry-run` say what is applied and pending and change nothing."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from services import REPO, StackServices, database_url_for, run_mailbus, settings_env
from tcp_proxy import TcpProxy

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


@pytest.mark.parametrize(
    "command",
    [
        ["relay"],
        ["consume", "--priority", "p0"],
        ["status"],
        ["console"],  # review 2026-12-06 hole 19: the console and every CLI action too
        ["send", "show", "k"],
        ["dlq", "list"],
        ["suppress", "list"],
        ["retention", "run", "--dry-run"],
    ],
)
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


def test_a_process_started_before_its_database_answers_is_judged_once_it_does(
    settings: Settings, tmp_path: Path
) -> None:
    """The consumer started while PostgreSQL is unreachable waits for it; once it answers,
    at a schema behind the build, it exits 2 instead of running on a schema it cannot use
    (review 2026-12-06 hole 19)."""
    _forget_last_two(settings.database_url)
    url = urlsplit(settings.database_url)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
    proxy.cut()  # PostgreSQL is down
    through = urlunsplit(
        url._replace(netloc=f"{url.username}:{url.password}@127.0.0.1:{proxy.port}")
    )
    env = settings_env(settings, MAILBUS_DATABASE_URL=through)
    with (tmp_path / "consume.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mailbus", "consume", "--priority", "p0"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        time.sleep(3)
        assert process.poll() is None  # waiting for the database, not judged
        proxy.restore()  # PostgreSQL is back
        assert process.wait(60) == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        proxy.close()
    assert (
        f"database at {BEHIND}, this build needs {BUILD}" in (tmp_path / "consume.log").read_text()
    )
