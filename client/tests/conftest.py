"""The slim client's own tests: they import mailbus_client, psycopg and pytest only, so they
run in a venv holding just those (docs/development.md#the-client-on-every-python).

A database per test on the PostgreSQL server of MAILBUS_DATABASE_URL, cloned from one the
session migrates with mailbus (``python -m mailbus migrate``'s function, run by the
interpreter MAILBUS_TEST_MIGRATE_PYTHON names: the one that has mailbus installed;
default this one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[2]
MIGRATE = (
    "import sys; from mailbus.app.migrate import apply_migrations; apply_migrations(sys.argv[1])"
)


def _server_url() -> str:
    return os.environ.get("MAILBUS_DATABASE_URL", "postgresql://localhost/mailbus")


def _url_for(name: str) -> str:
    return urlunsplit(urlsplit(_server_url())._replace(path=f"/{name}"))


def _create(name: str, template: str | None = None) -> None:
    with psycopg.connect(_server_url(), autocommit=True) as admin:
        clone = f' TEMPLATE "{template}"' if template else ""
        admin.execute(f'CREATE DATABASE "{name}"{clone}')


def _drop(name: str) -> None:
    with psycopg.connect(_server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def template_database() -> Iterator[str]:
    name = f"mailbus_client_template_{os.getpid()}"
    _drop(name)
    _create(name)
    python = os.environ.get("MAILBUS_TEST_MIGRATE_PYTHON", sys.executable)
    done = subprocess.run(
        [python, "-c", MIGRATE, _url_for(name)],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"migrating with {python} failed:\n{done.stderr}"
    yield name
    _drop(name)


@pytest.fixture
def database_url(template_database: str) -> Iterator[str]:
    name = f"mailbus_client_test_{uuid.uuid4().hex[:12]}"
    _create(name, template_database)
    yield _url_for(name)
    _drop(name)
