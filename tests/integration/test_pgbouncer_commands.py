"""The one-shot commands through a real transaction-pooling PgBouncer with
MAILBUS_DATABASE_TRANSACTION_POOLING (docs/guides/pgbouncer.md). A command that runs one
statement over and over on its connection has psycopg prepare it (its sixth run, under
the name ``_pg3_0`` every connection uses), in whichever server session the pooler lent:
one where another client's ``_pg3_0`` already is fails it ("already exists"), the next
transaction's lacks it ("does not exist"). With the setting such a command exits 2 naming
it before it touches the database; the others work through the pooler."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from pgbouncer import PgBouncer
from services import run_mailbus

NAME = "MAILBUS_DATABASE_TRANSACTION_POOLING"
POOL = 3  # the fixture's default_pool_size


def prepared_in_every_session(url: str) -> None:
    """Another client's ``_pg3_0`` in each server session of the pool (what a command
    that prepared a statement leaves behind)."""
    clients = [psycopg.connect(url) for _ in range(POOL)]  # each holds a session in turn
    try:
        for client in clients:
            for _ in range(6):
                client.execute("SELECT 1")
        for client in clients:
            client.commit()  # the session back in the pool, its statement kept
    finally:
        for client in clients:
            client.close()


@pytest.fixture
def environ(pgbouncer: PgBouncer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBUS_")}
    env.update({NAME: "true", "MAILBUS_DATABASE_URL": pgbouncer.url})
    prepared_in_every_session(pgbouncer.url)
    return env


@pytest.mark.parametrize(
    "command",
    [
        ["retention", "run", "--dry-run"],  # a count per table
        ["retention", "floors", "--set"],  # an UPDATE per table
        ["retention", "run"],  # a DELETE per batch
        ["dlq", "replay"],  # a guarded transaction per dead letter
        ["suppress", "import", "six-batches.csv"],  # an INSERT per 5,000 lines
        ["campaign", "run", "1"],  # the pacer's round per tick
    ],
)
def test_a_command_repeating_a_statement_refuses_transaction_pooling(
    environ: dict[str, str], command: list[str], tmp_path: Path
) -> None:
    addresses = tmp_path / "six-batches.csv"
    addresses.write_text("email\n" + "".join(f"a{n}@example.com\n" for n in range(6 * 5000)))
    command = [str(addresses) if word == addresses.name else word for word in command]
    run = run_mailbus(*command, "--json", env=environ)
    assert (run.returncode, run.stdout) == (2, ""), run.stderr
    assert f'"message": "{NAME}: this command needs a database session' in run.stderr


@pytest.mark.parametrize(
    "command", [["status"], ["dlq", "list"], ["suppress", "list"], ["campaign", "list"]]
)
def test_a_command_running_each_statement_once_works_through_it(
    environ: dict[str, str], command: list[str]
) -> None:
    run = run_mailbus(*command, "--json", env=environ)
    assert run.returncode == 0, run.stderr
