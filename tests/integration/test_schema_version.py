"""A process refuses a database behind its build with one line; `migrate --status` and
`--dry-run` say what is applied and pending and change nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
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


def _proxied(database_url: str) -> tuple[TcpProxy, str]:
    """A proxy to the database whose link can be cut, and the URL through it."""
    url = urlsplit(database_url)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
    netloc = f"{url.username}:{url.password}@127.0.0.1:{proxy.port}"
    return proxy, urlunsplit(url._replace(netloc=netloc))


def _start(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[str]:
    with log_path.open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "mailbus", *command],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )


def test_a_process_started_before_its_database_answers_is_judged_once_it_does(
    settings: Settings, tmp_path: Path
) -> None:
    """The consumer started while PostgreSQL is unreachable waits for it; once it answers,
    at a schema behind the build, it exits 2 instead of running on a schema it cannot use
    (review 2026-12-06 hole 19)."""
    _forget_last_two(settings.database_url)
    proxy, through = _proxied(settings.database_url)
    proxy.cut()  # PostgreSQL is down
    env = settings_env(settings, MAILBUS_DATABASE_URL=through)
    process = _start(["consume", "--priority", "p0"], env, tmp_path / "consume.log")
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(port: int) -> bool:
    """``/readyz`` as a Kubernetes probe asks it (each time a new database connection)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:  # 503 (an HTTPError), or not listening yet
        return False


def _environment(name: str, settings: Settings, tmp_path: Path) -> dict[str, str]:
    if name == "webhooks":
        return {"MAILBUS_WEBHOOK_SECRET": "s" * 32, "MAILBUS_WEBHOOK_LISTEN": "127.0.0.1:0"}
    if name == "intake":
        return {
            "MAILBUS_INTAKE_TOPIC": f"{settings.topic_prefix}.orders.events",
            "MAILBUS_STATE_DIR": str(tmp_path / "state"),
        }
    return {}


@pytest.mark.parametrize(
    ("command", "probed"),
    [
        (["relay"], False),  # its own reconnect finds it
        (["consume", "--priority", "p0"], False),
        (["webhooks"], True),  # idle: the connection of a /readyz finds it
        (["intake"], True),
    ],
    ids=["relay", "consume", "webhooks", "intake"],
)
def test_a_running_process_that_reconnects_to_a_database_behind_the_build_exits_2(
    settings: Settings, tmp_path: Path, command: list[str], probed: bool
) -> None:
    """A process judged at start keeps running; its database is then restored from an
    older backup (or failed over to a replica behind): the first new connection (its own
    reconnect, or the one of a ``/readyz``) finds the schema behind, and the process stops
    as on SIGTERM and exits 2 with the start-up check's message (issue 35)."""
    proxy, through = _proxied(settings.database_url)
    port = _free_port()
    env = settings_env(
        settings,
        MAILBUS_DATABASE_URL=through,
        MAILBUS_METRICS_PORT=str(port),
        **_environment(command[0], settings, tmp_path),
    )
    log_path = tmp_path / "process.log"
    process = _start(command, env, log_path)
    try:
        deadline = time.monotonic() + 90
        while not _ready(port):  # running on the build's schema
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        _forget_last_two(settings.database_url)  # the database restored from an older backup
        proxy.cut()  # its connections are gone: the process reconnects
        time.sleep(1)
        proxy.restore()
        deadline = time.monotonic() + 90
        while process.poll() is None and time.monotonic() < deadline:
            if probed:
                assert not _ready(port)
            time.sleep(1)
        try:
            code = process.wait(5)
        except subprocess.TimeoutExpired:
            code = None  # still running: its log says where it stopped
        assert code == 2, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        proxy.close()
    output = log_path.read_text()
    assert "Traceback" not in output
    assert output.strip().splitlines()[-1] == (
        f"mailbus: configuration error: MAILBUS_DATABASE_URL: database at {BEHIND},"
        f" this build needs {BUILD}: run `mailbus migrate`"
    )
