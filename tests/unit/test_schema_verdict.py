"""The verdict the start-up check and the guard on each new connection share."""

from mailbus.kernel.schema_version import behind


def test_a_database_holding_every_migration_of_the_build_may_be_used() -> None:
    assert behind(database_version=70, build_version=70, missing=0) is None
    assert behind(database_version=71, build_version=70, missing=0) is None  # a newer database


def test_a_database_missing_one_says_where_it_is_and_what_to_run() -> None:
    assert behind(database_version=68, build_version=70, missing=2) == (
        "database at 68, this build needs 70: run `mailbus migrate`"
    )
    # a hole below the newest (a migration of a branch merged late) is behind too
    assert behind(database_version=70, build_version=70, missing=1) is not None
