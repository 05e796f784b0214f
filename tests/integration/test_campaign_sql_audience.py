"""`--audience-sql`: an audience read from the application's own tables in PostgreSQL, page
by page (keyset pagination on user_id), checked like a CSV, fanned out like one."""

from __future__ import annotations

import psycopg
import pytest
from services import run_mailbus, settings_env

from mailbus.campaigns.audience import Rejected
from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.pacer import Pacer
from mailbus.campaigns.sql_audience import SqlAudience
from mailbus.campaigns.store import CampaignSpec, create_campaign, transition
from mailbus.kernel.settings import Settings


def make_users(database_url: str, n: int) -> None:
    """An application table: integer ids (sorted as numbers, not text), opted-in flags."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "CREATE TABLE app_users (id bigint PRIMARY KEY, mail text, name text,"
            " opted_in boolean NOT NULL)"
        )
        conn.execute(
            "INSERT INTO app_users SELECT i, format('user%%s@example.com', i),"
            " CASE WHEN i %% 10 = 0 THEN NULL ELSE format('N%%s', i) END, i %% 7 <> 0"
            " FROM generate_series(1, %s) AS i",
            (n,),
        )


QUERY = (
    "SELECT id AS user_id, mail AS email, name AS first_name FROM app_users"
    " WHERE opted_in AND mail LIKE 'user%'"  # a % of the operator's own stays a %
)


def test_pages_cover_every_row_once_in_user_id_order(database_url: str) -> None:
    make_users(database_url, 1000)
    with SqlAudience(database_url, QUERY, page_size=7) as audience:
        assert audience.columns == ["user_id", "first_name"]
        records = list(audience.records())
    ids = [int(r.user_id) for r in records if not isinstance(r, Rejected)]
    expected = [i for i in range(1, 1001) if i % 7 != 0]
    assert ids == expected  # numeric order across page boundaries, nothing twice or lost
    first = records[0]
    assert not isinstance(first, Rejected)
    assert first.email == "user1@example.com"
    assert first.variables == {"user_id": "1", "first_name": "N1"}


def test_a_campaign_from_sql_fans_out_once_per_row_and_filters_the_suppressed(
    database_url: str,
) -> None:
    make_users(database_url, 3000)
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE app_users SET mail = 'not an address' WHERE id = 2")
        conn.execute("INSERT INTO email_suppressions (address) VALUES ('USER3@example.com')")
    rejected: list[Rejected] = []
    with SqlAudience(database_url, QUERY.replace(" AND mail LIKE 'user%'", ""), 500) as audience:
        report = create_campaign(
            database_url,
            CampaignSpec(name="sql", template="newsletter", rate_per_min=10**8),
            audience,
            rejected.append,
        )
    eligible = [i for i in range(1, 3001) if i % 7 != 0]
    assert [r.line for r in rejected] == [2]  # the second row of the result
    assert "not an address" in rejected[0].problem
    assert report.recipients == len(eligible) - 1
    transition(database_url, report.campaign_id, "start")
    pacer = Pacer(database_url, only=report.campaign_id, max_batch=1000)
    with psycopg.connect(database_url, autocommit=True) as conn:
        while (tick := pacer.tick(conn, report.campaign_id)) and not tick.fanned_out:
            pass
        keys = {
            key
            for (key,) in conn.execute(
                "SELECT dedupe_key FROM email_sends WHERE campaign_id = %s",
                (report.campaign_id,),
            )
        }
    assert keys == {f"campaign-{report.campaign_id}-user-{i}" for i in eligible if i not in (2, 3)}


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("SELECT id AS user_id, name FROM app_users", "no 'email' column"),
        ("SELECT mail AS email FROM app_users", "no 'user_id' column"),
        ("SELECT id AS user_id, mail AS email, name AS email FROM app_users", "appears twice"),
        ("SELECT user_id, email FROM no_such_table", "no_such_table"),
        ("DELETE FROM app_users RETURNING id AS user_id, mail AS email", "--audience-sql"),
    ],
)
def test_a_query_without_the_columns_is_refused_clearly(
    database_url: str, query: str, problem: str
) -> None:
    make_users(database_url, 10)
    with pytest.raises(CampaignError, match="--audience-sql") as caught:
        SqlAudience(database_url, query)
    assert problem in str(caught.value)
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM app_users").fetchone()
    assert row == (10,)  # the query could not write


def test_create_with_audience_sql_on_the_command_line(settings: Settings) -> None:
    make_users(settings.database_url, 50)
    env = settings_env(settings)
    done = run_mailbus(
        "campaign", "create", "--name", "sql", "--template", "newsletter",
        "--audience-sql", QUERY, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "43 recipients imported" in done.stdout
    bad = run_mailbus(
        "campaign", "create", "--name", "sql", "--template", "newsletter",
        "--audience-sql", "SELECT id AS user_id FROM app_users", env=env,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "--audience-sql: the query returns no 'email' column" in bad.stderr


def test_audience_sql_accepts_exactly_one_select(settings: Settings) -> None:
    """`; COMMIT; CREATE ...` once ended the read-only transaction and ran outside it."""
    make_users(settings.database_url, 5)
    attack = (
        "SELECT id AS user_id, mail AS email FROM app_users) AS a; COMMIT;"
        " CREATE TABLE escaped (x int); SELECT * FROM (SELECT id AS user_id, mail AS email"
        " FROM app_users"
    )
    done = run_mailbus(
        "campaign", "create", "--name", "attack", "--template", "newsletter",
        "--audience-sql", attack, env=settings_env(settings),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert "--audience-sql: exactly one SELECT is accepted" in done.stderr
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute(
            "SELECT to_regclass('escaped'), (SELECT count(*) FROM campaigns)"
        ).fetchone()
    assert row == (None, 0)  # nothing escaped, nothing was created
