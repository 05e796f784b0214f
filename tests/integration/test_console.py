"""`mailbus console` through aiohttp's test client against the real PostgreSQL, the
console logged in as a member of mailbus_console (its least-privilege role): sign-in,
CSRF refusals, a viewer refused an action, each action's audit row, and the pages."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient
from console_support import CSRF, audit_rows, console_login, serve, sign_in
from services import REPO, run_mailbus

from mailbus.console.access import User, parse_users

pytestmark = pytest.mark.stack


@pytest.fixture
def operator_url(database_url: str) -> Iterator[str]:
    with console_login(database_url) as url:
        yield url


def suppressed(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [r[0] for r in conn.execute("SELECT address FROM email_suppressions")]


def test_sign_in_with_the_password_file_and_only_with_it(operator_url: str) -> None:
    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        first = await client.get("/", allow_redirects=False)
        assert first.status == 303 and first.headers["Location"] == "/login"
        page = await client.get("/login")
        token = CSRF.search(await page.text())
        assert token is not None
        wrong = await client.post(
            "/login", data={"csrf": token.group(1), "name": "ana", "password": "nope"}
        )
        assert wrong.status == 401
        forged = await client.post(
            "/login", data={"csrf": "forged", "name": "ana", "password": "ana-secret"}
        )
        assert forged.status == 403
        await sign_in(client, "ana", "ana-secret")
        overview = await client.get("/")
        text = await overview.text()
        assert overview.status == 200 and "Mails by priority and status" in text
        assert overview.headers["X-Frame-Options"] == "DENY"
        assert "script-src 'none'" in overview.headers["Content-Security-Policy"]

    serve(operator_url, scenario)
    assert audit_rows(operator_url) == [
        ("ana", "none", "login_failed", "127.0.0.1", 0),
        ("ana", "operator", "login", "127.0.0.1", 0),
    ]


def test_a_forged_or_missing_csrf_token_is_refused_and_changes_nothing(operator_url: str) -> None:
    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        await sign_in(client, "ana", "ana-secret")
        forged = await client.post(
            "/suppressions/add", data={"csrf": "forged", "address": "x@example.com"}
        )
        assert forged.status == 403
        assert "CSRF" in await forged.text()
        missing = await client.post("/suppressions/add", data={"address": "x@example.com"})
        assert missing.status == 403

    serve(operator_url, scenario)
    assert suppressed(operator_url) == []
    refused = [row for row in audit_rows(operator_url) if row[2] == "refused"]
    assert [(r[0], r[3]) for r in refused] == [("ana", "/suppressions/add")] * 2


def test_a_viewer_reads_but_is_refused_an_action(operator_url: str) -> None:
    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        csrf = await sign_in(client, "vic", "vic-secret")
        assert (await client.get("/dead-letters")).status == 200
        acted = await client.post(
            "/suppressions/add", data={"csrf": csrf, "address": "x@example.com"}
        )
        assert acted.status == 403
        assert "viewers may look" in await acted.text()

    serve(operator_url, scenario)
    assert suppressed(operator_url) == []
    assert audit_rows(operator_url)[-1][:3] == ("vic", "viewer", "refused")


def test_a_trusted_proxy_header_names_the_user(operator_url: str) -> None:
    proxy = {"X-Mailbus-Proxy-Secret": "proxy-secret"}

    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        assert (await client.get("/", allow_redirects=False)).status == 303  # no header
        page = await client.get("/suppressions", headers={"X-Forwarded-User": "ana", **proxy})
        assert page.status == 200 and "ana (operator)" in await page.text()
        stranger = await client.get("/", headers={"X-Forwarded-User": "zed", **proxy})
        assert "zed (viewer)" in await stranger.text()

    serve(operator_url, scenario, proxy_header="X-Forwarded-User", proxy_secret="proxy-secret")


def test_suppressions_add_search_remove_case_insensitively_with_audit(operator_url: str) -> None:
    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        csrf = await sign_in(client, "ana", "ana-secret")
        added = await client.post(
            "/suppressions/add", data={"csrf": csrf, "address": "Ana@Example.COM"}
        )
        assert added.status == 200
        assert "ana@example.com: suppressed" in await added.text()
        bad = await client.post("/suppressions/add", data={"csrf": csrf, "address": "no at"})
        assert bad.status == 400
        found = await client.get("/suppressions", params={"q": "EXAMPLE"})
        assert "ana@example.com" in await found.text()
        removed = await client.post(
            "/suppressions/remove", data={"csrf": csrf, "address": "ANA@example.com"}
        )
        assert "removed from the suppression list" in await removed.text()

    serve(operator_url, scenario)
    assert suppressed(operator_url) == []
    actions = [(r[2], r[3]) for r in audit_rows(operator_url)[1:]]
    assert actions == [
        ("suppress_add", "ana@example.com"),
        ("suppress_remove", "ana@example.com"),
    ]


def test_campaign_from_an_uploaded_csv_names_its_bad_lines_and_moves(operator_url: str) -> None:
    lines = ["user_id,email,first_name"]
    lines += [f"u{n},user{n}@example.com,N{n}" for n in range(1, 41)]
    lines[7] = "u7,not-an-address,N7"
    lines[20] = "u20,user20@example.com"  # a field missing
    csv = ("\n".join(lines) + "\n").encode()

    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        csrf = await sign_in(client, "ana", "ana-secret")
        form = FormData()
        form.add_field("csrf", csrf)
        form.add_field("name", "spring")
        form.add_field("template", "newsletter")
        form.add_field("priority", "p2")
        form.add_field("rate", "600")
        form.add_field("audience", csv, filename="spring.csv", content_type="text/csv")
        created = await client.post("/campaigns/new", data=form)
        text = await created.text()
        assert created.status == 200, text
        assert "38 recipients imported, 2 lines skipped" in text
        assert "line 8: email" in text and "line 21: expected 3 fields, found 2" in text
        campaign_id = int(re.search(r'href="/campaigns/(\d+)"', text).group(1))  # type: ignore[union-attr]
        forged = FormData()
        forged.add_field("csrf", "forged")
        forged.add_field("audience", b"user_id,email\n", filename="x.csv")
        assert (await client.post("/campaigns/new", data=forged)).status == 403
        for verb in ("start", "pause"):
            moved = await client.post(f"/campaigns/{campaign_id}/{verb}", data={"csrf": csrf})
            assert moved.status == 200
        page = await client.get(f"/campaigns/{campaign_id}")
        assert '<strong id="state">paused</strong>' in await page.text()
        with psycopg.connect(operator_url) as conn:  # as the reputation guard pauses
            conn.execute(
                "UPDATE campaigns SET paused_reason = %s WHERE id = %s",
                ("reputation: bounce rate 6.00%", campaign_id),
            )
        page = await client.get(f"/campaigns/{campaign_id}")
        shown = '(<span id="paused-reason">reputation: bounce rate 6.00%</span>)'
        assert shown in await page.text()
        listing = await client.get("/campaigns")
        assert "spring" in await listing.text()

    serve(operator_url, scenario)
    actions = [(r[2], r[4]) for r in audit_rows(operator_url)[1:] if r[2] != "refused"]
    assert actions == [("campaign_create", 38), ("campaign_start", 0), ("campaign_pause", 0)]


def _failed_with_dead_letters(database_url: str, count: int) -> None:
    with psycopg.connect(database_url) as conn:
        for n in range(count):
            send_id = conn.execute(
                "INSERT INTO email_sends (dedupe_key, to_address, template, status, attempts)"
                " VALUES (%s, %s, 'receipt', 'failed', 1) RETURNING id",
                (f"dl-{n}", f"dl{n}@example.com"),
            ).fetchone()[0]  # type: ignore[index]
            conn.execute(
                "INSERT INTO email_dead_letters (send_id, dedupe_key, priority, template,"
                " reason, status_code, error, attempts)"
                " VALUES (%s, %s, 'p1', 'receipt', 'rejected', 422, 'bad template', 1)",
                (send_id, f"dl-{n}"),
            )


def test_dead_letters_dry_run_then_two_confirms_replay_each_once(
    database_url: str, operator_url: str
) -> None:
    _failed_with_dead_letters(database_url, 3)

    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        csrf = await sign_in(client, "ana", "ana-secret")
        dry = await client.get("/dead-letters/replay", params={"reason": "rejected"})
        assert "3 mails would be re-sent" in await dry.text()
        confirm = {"csrf": csrf, "reason": "rejected", "limit": "3"}
        both = await asyncio.gather(
            client.post("/dead-letters/replay", data=confirm),
            client.post("/dead-letters/replay", data=confirm),
        )
        assert [answer.status for answer in both] == [200, 200]
        for _ in range(100):
            page = await (await client.get("/dead-letters")).text()
            if page.count("running") == 0 and "Replay 2" in page:
                break
            await asyncio.sleep(0.05)
        story = await client.get("/mail", params={"q": "DL1@example.com"})
        assert "dl-1" in await story.text() and "pending" in await story.text()

    serve(operator_url, scenario)
    with psycopg.connect(operator_url) as conn:
        replays = conn.execute("SELECT count(*) FROM email_replays").fetchone()
        statuses = conn.execute("SELECT DISTINCT status FROM email_sends").fetchall()
    assert replays == (3,) and statuses == [("pending",)]
    replayed = sorted(r[4] for r in audit_rows(operator_url) if r[2] == "dlq_replay")
    # two confirms at once: each mail replayed by exactly one of them, however they interleave
    assert len(replayed) == 2 and sum(replayed) == 3


def test_a_mails_story_by_message_id_hides_its_variables(
    database_url: str, operator_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template, payload_json, status,"
            " message_id, attempts) VALUES ('reset-9', 'r@example.com', 'password_reset',"
            """ '{"token": "s3cr3t-token"}', 'accepted', 'msg-9', 1)"""
        )

    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        await sign_in(client, "vic", "vic-secret")
        page = await (await client.get("/mail", params={"q": "msg-9"})).text()
        assert "reset-9" in page and "token" in page
        assert "s3cr3t-token" not in page

    serve(operator_url, scenario)


def test_the_command_needs_users_and_hashes_a_password(database_url: str, tmp_path: Path) -> None:
    env = {"MAILBUS_DATABASE_URL": database_url, "PATH": os.environ.get("PATH", "")}
    refused = run_mailbus("console", env=env)
    assert refused.returncode == 2
    assert "MAILBUS_CONSOLE_USERS_FILE" in refused.stderr
    hashed = subprocess.run(
        [sys.executable, "-m", "mailbus", "console", "hash-password", "ana", "operator"],
        input="pw\n", capture_output=True, text=True, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    assert hashed.returncode == 0, hashed.stderr
    users = parse_users(hashed.stdout)
    line_hash = hashed.stdout.split(":", 2)[2].strip()
    assert users.check_password("ana", "pw") == User("ana", "operator", line_hash)
    assert users.check_password("ana", "other") is None
    bad = tmp_path / "users"
    bad.write_text("ana:admin:$argon2id$x\n")
    wrong = run_mailbus("console", env={**env, "MAILBUS_CONSOLE_USERS_FILE": str(bad)})
    assert wrong.returncode == 2 and "line 1: role must be viewer or operator" in wrong.stderr


def test_a_mails_page_shows_the_key_the_provider_sees(
    database_url: str, operator_url: str
) -> None:
    """docs/providers.md#the-key-the-provider-sees: the life after retention and the
    deployment's prefix."""
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO email_key_lives (dedupe_key, lives) VALUES ('order-5', 1)")
        conn.execute(
            "INSERT INTO email_sends (dedupe_key, to_address, template)"
            " VALUES ('order-5', 'o@example.com', 'welcome')"
        )

    async def scenario(client: TestClient) -> None:  # type: ignore[type-arg]
        await sign_in(client, "vic", "vic-secret")
        page = await (await client.get("/mail", params={"key": "order-5"})).text()
        assert "<dt>provider_key</dt><dd>stg:order-5~2</dd>" in page
        assert "<dt>key_life</dt><dd>2</dd>" in page

    serve(operator_url, scenario, key_prefix="stg:")
