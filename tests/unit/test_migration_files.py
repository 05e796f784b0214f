"""The migration files: versions from their names, in order, and never two with one
version (two branches that each added the next number would silently lose one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mailbus.app.migrate import LockWait, Migration, available_migrations, retry_delay, statements
from mailbus.kernel.errors import ConfigError


def write(directory: Path, *names: str) -> Path:
    for name in names:
        (directory / name).write_text(f"-- {name}\n")
    return directory


def test_versions_and_names_in_order(tmp_path: Path) -> None:
    write(tmp_path, "0002_b.sql", "0010_c_d.sql", "0001_a.sql", "README.md")
    found = available_migrations(tmp_path)
    assert [(m.version, m.name) for m in found] == [(1, "a"), (2, "b"), (10, "c_d")]
    assert found[0].sql == "-- 0001_a.sql\n"


def test_two_files_with_one_version_are_refused_naming_both(tmp_path: Path) -> None:
    write(tmp_path, "0001_a.sql", "0016_send_tags.sql", "0016_campaign_notes.sql")
    with pytest.raises(ConfigError) as refused:
        available_migrations(tmp_path)
    assert refused.value.setting == str(tmp_path)
    assert refused.value.problem == (
        "migrations 0016_campaign_notes.sql and 0016_send_tags.sql share version 16: renumber one"
    )


def test_the_shipped_migrations_have_distinct_versions() -> None:
    versions = [m.version for m in available_migrations()]
    assert versions == sorted(set(versions)) and versions[0] == 1


def test_an_online_migrations_statements_run_one_at_a_time() -> None:
    sql = (
        "-- mailbus: online\n-- two indexes; a ';' in a comment ends nothing\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx\n    ON t (a) WHERE b IN ('x', 'y;z');\n"
        "\nCREATE EXTENSION IF NOT EXISTS pg_trgm;\nCREATE INDEX CONCURRENTLY b_idx ON t (b)\n"
    )
    assert statements(sql) == [
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx\n    ON t (a) WHERE b IN ('x', 'y;z');",
        "CREATE EXTENSION IF NOT EXISTS pg_trgm;",
        "CREATE INDEX CONCURRENTLY b_idx ON t (b)",
    ]


def test_every_shipped_online_migration_is_statements_each_idempotent() -> None:
    for migration in available_migrations():
        if migration.online:
            for statement in statements(migration.sql):
                assert "IF NOT EXISTS" in statement, (migration.label, statement)


def test_a_lock_wait_backs_off_doubling_jittered_up_to_its_cap() -> None:
    wait = LockWait(lock_timeout_s=0.05, max_wait_s=60, first_delay_s=0.5, cap_s=4)
    assert [retry_delay(wait, tries, lambda: 1.0) for tries in range(1, 7)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        4.0,
        4.0,
    ]
    assert retry_delay(wait, 3, lambda: 0.0) == 1.0  # never less than half


def test_an_online_migration_names_only_the_indexes_it_builds() -> None:
    sql = (
        "-- mailbus: online\nCREATE EXTENSION IF NOT EXISTS pg_trgm;\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS Sends_To_Idx ON t (a);\n"
        "create unique index concurrently if not exists b_idx on t (b);\n"
    )
    assert Migration(43, "x", sql).index_names == ("sends_to_idx", "b_idx")
    assert "online" in Migration(43, "x", sql).plan
    assert Migration(17, "x", "-- mailbus: locking (why)\nALTER TABLE t;").plan.startswith(
        "locking"
    )
