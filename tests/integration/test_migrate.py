"""`mailbus migrate` is repeatable and safe to run concurrently."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
from services import REPO, StackServices, database_url_for

from mailbus.app.scratch_database import drop_database

_SCHEMA = """
SELECT table_name, column_name, data_type, is_nullable, column_default
FROM information_schema.columns WHERE table_schema = 'mailbus' ORDER BY 1, 2
"""
_INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'mailbus' ORDER BY 1"


def _schema(url: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with psycopg.connect(url) as conn:
        return conn.execute(_SCHEMA).fetchall(), conn.execute(_INDEXES).fetchall()


def test_migrate_twice_and_concurrently_gives_one_schema(services: StackServices) -> None:
    name = f"mailbus_migrate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url_for(services.database_url, name)
    env = {"MAILBUS_DATABASE_URL": url, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "client")}
    command = [sys.executable, "-m", "mailbus", "migrate", "--skip-topics"]
    try:
        runs = [
            subprocess.Popen(
                command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for _ in range(4)
        ]
        outputs = [run.communicate(timeout=120) for run in runs]
        assert [run.returncode for run in runs] == [0, 0, 0, 0], outputs
        applied_by_someone = [out for out, _ in outputs if b"applied [1" in out]
        assert len(applied_by_someone) == 1, outputs
        first = _schema(url)
        again = subprocess.run(command, env=env, cwd=REPO, capture_output=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert b"up to date" in again.stdout
        assert _schema(url) == first
        assert any(index == "email_sends_dedupe_key_key" for index, _ in first[1])
    finally:
        drop_database(services.database_url, name)
