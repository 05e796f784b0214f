"""The console's overview at any size (mailbus.app.overview), as mailbus_console: open rows
counted exactly, settled rows of a large table estimated from the statistics of migration
0037 (joint, not as if priority and status were unrelated) and labelled ≈ on the page."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator

import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.app.overview import collect_overview, overview_on
from mailbus.console.access import parse_users
from mailbus.console.server import make_app
from mailbus.console.web import Console

pytestmark = pytest.mark.stack

# (priority, status, rows): p2 is campaign mail, mostly accepted; p1 mostly failed. As if
# unrelated, p2/accepted would be 2,400 x 3/4 x 3/4 = 1,350; it is 1,800.
SETTLED = [("p2", "accepted", 1800), ("p1", "failed", 550), ("p1", "accepted", 50)]
OPEN = [("p0", "pending", 3), ("p1", "sending", 2), ("p2", "unknown", 1)]


@pytest.fixture
def operator_url(database_url: str) -> Iterator[str]:
    apply_roles(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for priority, status, rows in SETTLED + OPEN:
            conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, priority, status)"
                " SELECT %(s)s || '-' || %(p)s || '-' || n, 'a@example.com', 't', %(p)s, %(s)s"
                " FROM generate_series(1, %(rows)s) n",
                {"p": priority, "s": status, "rows": rows},
            )
        conn.execute("ANALYZE email_sends")
    with login_as(database_url, "mailbus_console") as url:
        yield url


def test_a_large_tables_settled_rows_are_estimated_and_its_open_rows_counted(
    operator_url: str,
) -> None:
    overview = collect_overview(operator_url, exact_below=0)  # as if the table were large

    assert overview["estimated"] is True
    counts = overview["by_priority"]
    for priority, status, rows in OPEN:
        assert counts[priority][status] == rows  # exact
    for priority, status, rows in SETTLED:
        assert abs(counts[priority][status] - rows) <= rows * 0.05, (priority, status, counts)
    assert abs(overview["failed"] - 550) <= 30
    assert set(overview["oldest_open_age_s"]) == {"p0", "p1", "p2"}


def test_a_small_table_is_counted_exactly(operator_url: str) -> None:
    overview = collect_overview(operator_url)

    assert overview["estimated"] is False
    for priority, status, rows in SETTLED + OPEN:
        assert overview["by_priority"][priority][status] == rows
    assert overview["failed"] == 550 and overview["not_yet_on_kafka"] == 3


def test_the_page_labels_estimates(operator_url: str) -> None:
    pages = {}

    async def main(exact_below: int) -> str:
        console = Console(
            database_url=operator_url,
            users=parse_users("ana:operator:-\n"),
            overview=functools.partial(overview_on, exact_below=exact_below),
            proxy_header="X-User",
            proxy_sources=("127.0.0.0/8",),  # the test client: the trusted proxy
        )
        async with TestClient(TestServer(make_app(console))) as client:
            page = await client.get("/", headers={"X-User": "ana"})
            assert page.status == 200
            return await page.text()

    for exact_below in (0, 2**40):
        pages[exact_below] = asyncio.run(main(exact_below))
    assert "<td>≈ 1800</td>" in pages[0] and "<td>3</td>" in pages[0]  # p2 accepted; p0 pending
    assert "estimated from PostgreSQL's statistics" in pages[0]
    assert "≈" not in pages[2**40] and "<td>1800</td>" in pages[2**40]
