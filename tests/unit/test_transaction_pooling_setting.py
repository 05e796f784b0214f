"""MAILBUS_DATABASE_TRANSACTION_POOLING: read as a flag, the connection keywords it gives the
processes that may run behind a transaction-pooling PgBouncer, and the commands that need a
session of their own refusing it (docs/guides/pgbouncer.md)."""

from __future__ import annotations

import os

import pytest
from services import run_mailbus

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.pooling import connect_options
from mailbus.kernel.settings import load_settings

NAME = "MAILBUS_DATABASE_TRANSACTION_POOLING"


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, False), ("", False), ("false", False), ("true", True), ("1", True)]
)
def test_the_flag(raw: str | None, expected: bool) -> None:
    environ = {} if raw is None else {NAME: raw}
    assert load_settings(environ).database_transaction_pooling is expected


def test_a_bad_value_names_the_setting() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({NAME: "transaction"})
    assert error.value.setting == NAME


def test_under_transaction_pooling_no_statement_is_prepared() -> None:
    assert connect_options(True) == {"prepare_threshold": None}
    assert connect_options(False) == {}  # psycopg's default: prepared after 5 executions


@pytest.mark.parametrize(
    "command",
    [
        ["relay"],
        ["migrate"],
        ["console"],
        ["campaign", "create", "--name", "n", "--template", "t", "--audience", "a.csv"],
        ["campaign", "import", "1", "--audience", "a.csv"],
    ],
)
def test_a_command_that_needs_a_session_refuses_to_start_with_it(command: list[str]) -> None:
    """The relay (LISTEN), migrate, the console and a campaign import (session advisory
    locks) cannot work through transaction pooling: exit 2 before touching the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBUS_")}
    env.update({NAME: "true", "MAILBUS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    run = run_mailbus(*command, env=env)
    assert run.returncode == 2, run.stderr
    [line] = run.stderr.strip().splitlines()
    assert line.startswith(f"mailbus: configuration error: {NAME}: this command needs a database")
