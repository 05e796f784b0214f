"""MAILBUS_DATABASE_TRANSACTION_POOLING: read as a flag, and the connection keywords it
gives the processes that may run behind a transaction-pooling PgBouncer."""

from __future__ import annotations

import pytest

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
