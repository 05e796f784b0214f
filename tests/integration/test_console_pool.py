"""`mailbus console` reads through a pool of connections (console/server.py): a
connection PostgreSQL dropped (a restart, a failover, an idle timeout) is replaced when
it is next taken, so the page answers instead of failing once per dropped connection."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.app.overview import overview_on
from mailbus.console.access import parse_users
from mailbus.console.server import make_app, open_pool
from mailbus.console.web import Console

pytestmark = pytest.mark.stack

PAGES = ["/", "/mail?q=nobody@example.com", "/campaigns", "/readyz"]


def drop_connections(url: str) -> int:
    """Terminate the other connections of ``url``'s role (a role may end its own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE usename = current_user AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_pages_still_answer_after_postgresql_drops_the_pools_connections(
    database_url: str,
) -> None:
    apply_roles(database_url)
    with login_as(database_url, "mailbus_console") as url:

        async def main() -> list[tuple[str, int, int]]:
            pool = open_pool(url)
            console = Console(
                database_url=url,
                users=parse_users("ana:operator:-\n"),
                overview=overview_on,
                proxy_header="X-User",
                proxy_sources=("127.0.0.0/8",),  # the test client: the trusted proxy
                pool=pool,
            )
            answers = []
            try:
                async with TestClient(TestServer(make_app(console))) as client:
                    for path in PAGES:
                        before = await client.get(path, headers={"X-User": "ana"})
                        dropped = await asyncio.to_thread(drop_connections, url)
                        after = await client.get(path, headers={"X-User": "ana"})
                        answers.append((path, before.status, after.status))
                        assert dropped >= 1  # the pool's connection, kept open, was dropped
            finally:
                await asyncio.to_thread(pool.close)
            return answers

        answers = asyncio.run(main())
    assert answers == [(path, 200, 200) for path in PAGES]
