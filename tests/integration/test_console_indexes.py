"""The console's reads at scale use migration 0043's indexes
(docs/guides/console.md#the-overview-at-any-size): on tables with enough rows for a
sequential scan to cost more, with
``enable_seqscan`` left on, the planner picks each index for the console's own query, as
the least-privilege roles that run it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from services import StackServices, database_url_for
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.app.scratch_database import drop_database
from mailbus.app.status import _DEAD_LETTERS
from mailbus.feedback import suppressions
from mailbus_client.sqlfiles import load_queries

pytestmark = pytest.mark.stack

ROWS = 20_000
CAMPAIGN = 7
FILL = [
    # One campaign's mail, a few of them bounced or complained about.
    "INSERT INTO campaigns (id, name, template, state, rate_per_min) OVERRIDING SYSTEM VALUE"
    f" VALUES ({CAMPAIGN}, 'c', 't', 'finished', 100)",
    "INSERT INTO email_sends (dedupe_key, to_address, template, status, campaign_id,"
    " delivery_status)"
    f" SELECT 'k' || n, 'user' || n || '@example.com', 't', 'accepted', {CAMPAIGN},"
    " CASE n % 1000 WHEN 1 THEN 'bounced' WHEN 2 THEN 'complained' ELSE 'delivered' END"
    f" FROM generate_series(1, {ROWS}) n",
    # Dead letters, all but a few replayed.
    "INSERT INTO email_dead_letters (send_id, dedupe_key, priority, template, reason,"
    " error, attempts, replayed_at)"
    " SELECT id, dedupe_key, 'p2', 't', 'max_attempts', 'refused', 1,"
    " CASE WHEN id % 1000 = 0 THEN NULL ELSE now() END FROM email_sends",
    # A suppression list, a few unsubscribed through the campaign's links.
    "INSERT INTO email_suppressions (address, reason, source)"
    " SELECT 'user' || n || '@example.com',"
    " CASE WHEN n % 1000 = 0 THEN 'unsubscribed' ELSE 'bounced' END,"
    f" CASE WHEN n % 1000 = 0 THEN 'campaign:{CAMPAIGN}' ELSE 'webhook' END"
    f" FROM generate_series(1, {ROWS}) n",
    "VACUUM ANALYZE email_sends",
    "VACUUM ANALYZE email_dead_letters",
    "VACUUM ANALYZE email_suppressions",
]


@pytest.fixture(scope="module")
def filled(services: StackServices, template_database: str) -> Iterator[str]:
    """One database for the module (filling it is the slow part), dropped at the end."""
    name = f"mailbus_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(services.database_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    url = database_url_for(services.database_url, name)
    try:
        apply_roles(url)
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in FILL:
                conn.execute(statement.encode())
        yield url
    finally:
        drop_database(services.database_url, name)


def plan(url: str, query: str, params: dict[str, object] | None = None) -> str:
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW enable_seqscan").fetchone() == ("on",)
        rows = conn.execute(f"EXPLAIN (COSTS OFF) {query}", params).fetchall()
    return "\n".join(r[0] for r in rows)


def console_query(name: str) -> str:
    return load_queries("mailbus.console", "console.sql")[name]


def test_the_overviews_dead_letters_not_replayed_read_only_those(filled: str) -> None:
    with login_as(filled, "mailbus_operator") as url:
        found = plan(url, _DEAD_LETTERS)
    assert "email_dead_letters_open_idx" in found, found
    assert "Seq Scan" not in found, found


def test_one_campaigns_bounces_complaints_and_unsubscribes_read_only_those(filled: str) -> None:
    with login_as(filled, "mailbus_operator") as url:
        found = plan(url, console_query("campaign_feedback"), {"id": CAMPAIGN})
        with psycopg.connect(url) as conn:
            row = conn.execute(console_query("campaign_feedback"), {"id": CAMPAIGN}).fetchone()
    assert "email_sends_campaign_feedback_idx" in found, found
    assert "email_suppressions_unsubscribed_idx" in found, found
    assert "Seq Scan" not in found, found
    assert row == (20, 20, 20)  # every 1000th of 20,000: the counts are still right


# The roles that read the suppression list (schemas/sql/roles/grants.sql).
@pytest.mark.parametrize(
    "role", ["mailbus_operator", "mailbus_relay", "mailbus_consumer", "mailbus_webhooks"]
)
def test_the_suppression_search_uses_trigrams_under_each_role_that_reads_the_list(
    filled: str, role: str
) -> None:
    query = load_queries("mailbus.feedback", "suppressions.sql")["search"]
    with login_as(filled, role) as url:
        found = plan(url, query, {"text": "SER1234", "limit": 100})
        entries = suppressions.search(url, "SER1234")
    assert "email_suppressions_address_trgm_idx" in found, found
    assert "Seq Scan" not in found, found
    addresses = (f"user{n}@example.com" for n in range(1, ROWS + 1))
    assert [e["address"] for e in entries] == sorted(a for a in addresses if "ser1234" in a)
