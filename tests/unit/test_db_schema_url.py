"""MAILBUS_DB_SCHEMA reaches every connection through the URL's libpq options."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mailbus.kernel.db_schema import with_search_path
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings, load_settings


def test_the_url_carries_the_schemas_search_path() -> None:
    settings = load_settings({"MAILBUS_DATABASE_URL": "postgresql://u:p@db:5432/app"})
    assert settings.db_schema == "mailbus"
    assert settings.database_url == (
        "postgresql://u:p@db:5432/app?options=-csearch_path%3Dmailbus%2Cpublic"
    )


def test_the_users_own_options_are_kept_and_a_search_path_among_them_replaced() -> None:
    url = (
        "postgresql://db/app?sslmode=require"
        "&options=-c%20statement_timeout%3D5s%20-c%20search_path%3Dother%20--work_mem%3D8MB"
    )
    settings = load_settings({"MAILBUS_DATABASE_URL": url, "MAILBUS_DB_SCHEMA": "mb_x"})
    assert settings.database_url == (
        "postgresql://db/app?sslmode=require&options=-c%20statement_timeout%3D5s"
        "%20--work_mem%3D8MB%20-csearch_path%3Dmb_x%2Cpublic"
    )


def test_any_settings_value_follows_its_schema_and_merging_again_changes_nothing() -> None:
    moved = replace(Settings(database_url="postgresql://db/app"), db_schema="mb_y")
    assert moved.database_url == "postgresql://db/app?options=-csearch_path%3Dmb_y%2Cpublic"
    assert with_search_path(moved.database_url, "mb_y") == moved.database_url


@pytest.mark.parametrize("bad", ["Mail-Bus", "public", "pg_mail", "1mailbus", "a b", "x" * 64])
def test_a_schema_that_is_no_plain_identifier_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="MAILBUS_DB_SCHEMA"):
        load_settings({"MAILBUS_DB_SCHEMA": bad})
