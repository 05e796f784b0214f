"""Dropping a test's database while another test drops a login role (real PostgreSQL):
`migrate --roles` gives every login of a process role a setting in each database it runs
against, so both drops delete the same pg_db_role_setting row, and the second to get there
failed with "tuple concurrently deleted" (a test errored on it in CI)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from services import StackServices

from mailbus.app.scratch_database import drop_database

pytestmark = pytest.mark.stack


def test_a_drop_racing_a_drop_role_over_the_same_setting_is_tried_again(
    services: StackServices,
) -> None:
    name = f"mailbus_scratch_{uuid.uuid4().hex[:12]}"
    login = f"test_login_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"CREATE ROLE {login} LOGIN")
        admin.execute(f'ALTER ROLE {login} IN DATABASE "{name}" SET search_path = public')
    failures: list[BaseException] = []

    def drop() -> None:
        try:
            drop_database(services.database_url, name)
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    with (
        psycopg.connect(services.database_url) as role_dropper,
        psycopg.connect(services.database_url, autocommit=True) as watcher,
    ):
        role_dropper.execute(f"DROP ROLE {login}")  # its transaction holds the row deleted
        dropping = threading.Thread(target=drop)
        dropping.start()
        waited = time.monotonic() + 10
        while not _waits_for_a_transaction(watcher, name):
            assert time.monotonic() < waited, "the drop never waited for the DROP ROLE"
            time.sleep(0.05)
        role_dropper.commit()
    dropping.join(30)
    assert not dropping.is_alive() and failures == []
    with psycopg.connect(services.database_url) as conn:
        gone = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        assert gone.fetchone() == (0,)


def _waits_for_a_transaction(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'transactionid'"
        " AND query LIKE %s",
        (f'DROP DATABASE%"{name}"%',),
    ).fetchone()
    return row == (1,)
