"""The console under aiohttp's test client against the real PostgreSQL, logged in as a
member of mailbus_console: its users, sign-in, and the audit it wrote."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import psycopg
from aiohttp.test_utils import TestClient, TestServer
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.app.overview import overview_on
from mailbus.console.access import hash_password, parse_users
from mailbus.console.server import make_app
from mailbus.console.web import Console

__all__ = ["CSRF", "USERS", "audit_rows", "console_login", "serve", "sign_in"]

USERS = parse_users(
    f"ana:operator:{hash_password('ana-secret')}\nvic:viewer:{hash_password('vic-secret')}\n"
)
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextmanager
def console_login(database_url: str) -> Iterator[str]:
    """The grants applied, and a login role in mailbus_console."""
    apply_roles(database_url)
    with login_as(database_url, "mailbus_console") as url:
        yield url


def serve(database_url: str, scenario: Callable[..., Awaitable[None]], **options: object) -> None:
    options = {"users": USERS, "replay_rate": None, **options}
    console = Console(database_url=database_url, overview=overview_on, **options)  # type: ignore[arg-type]

    async def main() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            await scenario(client)

    asyncio.run(main())


async def sign_in(client: TestClient, name: str, password: str) -> str:  # type: ignore[type-arg]
    """Sign in; the session's CSRF token (from the overview's forms)."""
    page = await client.get("/login")
    token = CSRF.search(await page.text())
    assert token is not None
    answer = await client.post(
        "/login", data={"csrf": token.group(1), "name": name, "password": password}
    )
    assert answer.status == 200, await answer.text()
    page = await client.get("/suppressions")
    found = CSRF.search(await page.text())
    assert found is not None
    return found.group(1)


def audit_rows(database_url: str) -> list[tuple[str, str, str, str, int]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT who, role, action, target, mails FROM console_audit ORDER BY id"
        ).fetchall()
