"""The console against the attacks of docs/guides/console.md#access, over HTTP,
logged in to PostgreSQL as a member of mailbus_console: forged multipart and cross-site
POSTs, oversized bodies before sign-in, password guessing (alone and in parallel), cookies
and HSTS, a proxy header from anyone, and uploads cut off or reused under a name."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient
from console_support import CSRF, USERS, audit_rows, console_login, serve, sign_in
from services import run_mailbus

from mailbus.console.access import User, Users
from mailbus.console.signin import Hashing

pytestmark = pytest.mark.stack

Client = TestClient  # type: ignore[type-arg]


@pytest.fixture
def console_url(database_url: str) -> Iterator[str]:
    with console_login(database_url) as url:
        yield url


def one(database_url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def draft_campaign(database_url: str) -> int:
    return int(
        one(
            database_url,
            "INSERT INTO campaigns (name, template, priority, rate_per_min, audience)"
            " VALUES ('c', 'newsletter', 'p2', 60, 'x') RETURNING id",
        )
    )


def multipart(**fields: str) -> FormData:
    form = FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    form.add_field("f", b"x", filename="f.txt")  # any file part makes it multipart/form-data
    return form


def test_a_multipart_post_is_refused_on_every_action_but_the_upload(console_url: str) -> None:
    """Review hole 1: the CSRF check was skipped for any multipart POST."""
    campaign = draft_campaign(console_url)
    with psycopg.connect(console_url) as conn:
        conn.execute("INSERT INTO email_suppressions (address) VALUES ('victim@x.org')")

    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        for path, fields in (
            (f"/campaigns/{campaign}/cancel", {}),
            ("/suppressions/remove", {"address": "victim@x.org"}),
            ("/dead-letters/replay", {"limit": "100000"}),
            (f"/campaigns/{campaign}/start", {"csrf": csrf}),  # even with the token
        ):
            answer = await client.post(path, data=multipart(**fields))
            assert answer.status == 415, (path, answer.status)

    serve(console_url, scenario)
    assert one(console_url, "SELECT state FROM campaigns WHERE id = %s", campaign) == "draft"
    assert one(console_url, "SELECT count(*) FROM email_suppressions") == 1
    assert [r[2] for r in audit_rows(console_url)] == ["login"]


def test_a_post_from_another_site_is_refused_even_with_the_token(console_url: str) -> None:
    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        form = {"csrf": csrf, "address": "x@example.com"}
        sibling = await client.post(
            "/suppressions/add", data=form, headers={"Sec-Fetch-Site": "same-site"}
        )
        assert sibling.status == 403 and "another site" in await sibling.text()
        elsewhere = await client.post(
            "/suppressions/add", data=form, headers={"Origin": "https://wiki.example.org"}
        )
        assert elsewhere.status == 403 and "another origin" in await elsewhere.text()
        assert elsewhere.headers["X-Frame-Options"] == "DENY"  # refusals too
        # a sign-out needs the token too (a forged one would end the operator's session)
        assert (await client.post("/logout", data={})).status == 403
        assert (await client.get("/", allow_redirects=False)).status == 200
        own = await client.post(
            "/suppressions/add",
            data=form,
            headers={
                "Sec-Fetch-Site": "same-origin",
                "Origin": f"http://{client.host}:{client.port}",
            },
        )
        assert own.status == 200

    serve(console_url, scenario)
    assert one(console_url, "SELECT count(*) FROM email_suppressions") == 1


def test_bodies_are_bounded_before_sign_in(console_url: str) -> None:
    """Review hole 2: an unauthenticated POST /login could send 4 GiB."""

    async def scenario(client: Client) -> None:
        big = await client.post(
            "/login",
            data=io.BytesIO(b"name=" + b"a" * (1024 * 1024)),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert big.status == 413
        spooled = FormData()
        spooled.add_field("f", io.BytesIO(b"\0" * (1024 * 1024)), filename="x")
        assert (await client.post("/login", data=spooled)).status == 415
        csrf = await sign_in(client, "ana", "ana-secret")
        signed_in = await client.post(
            "/suppressions/add",
            data=io.BytesIO(f"csrf={csrf}&address=".encode() + b"a" * (1024 * 1024)),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert signed_in.status == 413

    serve(console_url, scenario)  # MAILBUS_CONSOLE_MAX_BODY: 64 KiB


def test_wrong_passwords_back_off_per_name_and_per_source_and_are_audited(
    console_url: str,
) -> None:
    """Review hole 3: no limit, no audit of failures."""
    now = [1000.0]

    async def try_password(client: Client, name: str, password: str) -> Any:
        page = await client.get("/login")
        token = CSRF.search(await page.text())
        assert token is not None
        data = {"csrf": token.group(1), "name": name, "password": password}
        return await client.post("/login", data=data, allow_redirects=False)

    async def scenario(client: Client) -> None:
        for _ in range(5):
            assert (await try_password(client, "ana", "guess")).status == 401
        held = await try_password(client, "ana", "ana-secret")  # the right one: still held
        assert held.status == 429 and int(held.headers["Retry-After"]) == 1
        now[0] += 1
        assert (await try_password(client, "ana", "ana-secret")).status == 303
        for n in range(5):  # other names from the same address: 10 failures in all
            assert (await try_password(client, f"x{n}", "guess")).status == 401
        refused = await try_password(client, "vic", "vic-secret")
        assert refused.status == 429 and "too many failed sign-ins" in await refused.text()

    serve(console_url, scenario, clock=lambda: now[0])
    rows = audit_rows(console_url)
    failed = [(r[0], r[1], r[3]) for r in rows if r[2] == "login_failed"]
    assert failed == [("ana", "none", "127.0.0.1")] * 5 + [
        (f"x{n}", "none", "127.0.0.1") for n in range(5)
    ]


class SlowUsers(Users):
    """Password checks that wait until released: as many in flight as the pool admits."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()
        self.started = 0

    def check_password(self, name: str, password: str) -> User | None:
        self.started += 1
        self.release.wait(30)
        return None


BEHIND_PROXY = {"proxy_sources": ("127.0.0.0/8",)}  # X-Forwarded-For names the source


async def login_form(client: Client) -> str:
    """The login form's token (its cookie kept by the client's jar)."""
    page = await client.get("/login")
    token = CSRF.search(await page.text())
    assert token is not None
    return token.group(1)


async def post_from(client: Client, token: str, source: str, name: str, password: str) -> Any:
    """A sign-in from ``source`` (behind the proxy)."""
    return await client.post(
        "/login",
        data={"csrf": token, "name": name, "password": password},
        headers={"X-Forwarded-For": source},
        allow_redirects=False,
    )


async def sign_in_from(client: Client, source: str, name: str, password: str) -> Any:
    return await post_from(client, await login_form(client), source, name, password)


def flood(client: Client, token: str, tries: list[tuple[str, str]]) -> list[Any]:
    """Sign-ins (source, name) with the wrong password "guess", all at once."""
    return [
        asyncio.ensure_future(post_from(client, token, source, name, "guess"))
        for source, name in tries
    ]


def test_parallel_sign_ins_are_refused_beyond_the_hashing_pool(console_url: str) -> None:
    """Review hole 3: 40 parallel tries each held 64 MiB of Argon2 on an unbounded pool."""
    users = SlowUsers()

    async def scenario(client: Client) -> None:
        tries = flood(
            client, await login_form(client), [(f"10.0.0.{n}", f"n{n}") for n in range(40)]
        )
        deadline = time.monotonic() + 60
        # 1 thread + 2 waiting are admitted; the 37 others are answered while those wait
        while sum(t.done() for t in tries) < 37 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        users.release.set()
        statuses = [(await t).status for t in tries]
        assert sorted(set(statuses)) == [401, 503]
        assert statuses.count(401) == 3 and users.started == 3

    hashing = Hashing(threads=1, waiting=2, kept=0)
    serve(console_url, scenario, users=users, hashing=hashing, **BEHIND_PROXY)


def test_failures_flooded_at_a_name_never_hold_its_operator_at_a_clean_source(
    console_url: str,
) -> None:
    """Issue 35: a per-name limit let anyone who knows an operator's name lock them out.
    Failures from many sources slow those sources, never a source with a clean record."""
    now = [1000.0]

    async def scenario(client: Client) -> None:
        for n in range(30):  # one failure each from 30 addresses: 30 for the name
            assert (await sign_in_from(client, f"10.0.0.{n}", "ana", "guess")).status == 401
        again = await sign_in_from(client, "10.0.0.7", "ana", "guess")  # a source that failed
        assert again.status == 429 and int(again.headers["Retry-After"]) > 1
        signed_in = await sign_in_from(client, "192.0.2.1", "ana", "ana-secret")
        assert signed_in.status == 303, await signed_in.text()
        for _ in range(5):  # one source's own failures at the name hold that source ...
            assert (await sign_in_from(client, "10.1.0.1", "vic", "guess")).status == 401
        held = await sign_in_from(client, "10.1.0.1", "vic", "vic-secret")
        assert held.status == 429 and int(held.headers["Retry-After"]) == 1
        clean = await sign_in_from(client, "192.0.2.2", "vic", "vic-secret")  # ... only it
        assert clean.status == 303

    serve(console_url, scenario, clock=lambda: now[0], **BEHIND_PROXY)
    failed = [(r[0], r[3]) for r in audit_rows(console_url) if r[2] == "login_failed"]
    assert failed == [("ana", f"10.0.0.{n}") for n in range(30)] + [("vic", "10.1.0.1")] * 5


def test_an_ipv6_source_is_counted_by_its_64(console_url: str) -> None:
    """A host holds a whole /64: counted per address, each would have a clean record."""

    async def scenario(client: Client) -> None:
        for n in range(10):  # the source's 10 free failures, each from another address
            failed = await sign_in_from(client, f"2001:db8:0:1::{n + 1:x}", f"x{n}", "guess")
            assert failed.status == 401
        held = await sign_in_from(client, "2001:db8:0:1::ff", "ana", "ana-secret")
        assert held.status == 429
        other = await sign_in_from(client, "2001:db8:0:2::1", "ana", "ana-secret")
        assert other.status == 303

    serve(console_url, scenario, clock=lambda: 1000.0, **BEHIND_PROXY)
    sources = [r[3] for r in audit_rows(console_url) if r[2] == "login_failed"]
    assert sources == [f"2001:db8:0:1::{n + 1:x}" for n in range(10)]  # audited as they came


class HeldGuesses(Users):
    """The console's users, where a wrong password "guess" is checked only once released:
    a flood's checks stay in the pool while a clean source signs in."""

    def __init__(self) -> None:
        super().__init__([])
        self.release = threading.Event()

    def check_password(self, name: str, password: str) -> User | None:
        if password == "guess":
            self.release.wait(30)
        return USERS.check_password(name, password)


def test_a_clean_sign_in_gets_through_a_flood_from_one_source_or_at_one_name(
    console_url: str,
) -> None:
    """Issue 35: the shared Argon2 pool (2 threads, 8 waiting, else 503) let one source's
    flood answer 503 to everyone."""
    users = HeldGuesses()

    async def answered(tries: list[Any], count: int) -> None:
        deadline = time.monotonic() + 5  # today's pool answers fewer at once: then go on
        while sum(t.done() for t in tries) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def from_one_source(client: Client) -> None:
        tries = flood(client, await login_form(client), [("10.0.0.1", f"n{n}") for n in range(40)])
        await answered(tries, 39)  # one check at a time per source
        signed_in = await sign_in_from(client, "192.0.2.1", "ana", "ana-secret")
        assert signed_in.status == 303, await signed_in.text()
        users.release.set()
        answers = [await t for t in tries]
        assert [a.status for a in answers].count(401) == 1
        refused = [a for a in answers if a.status == 503]
        assert len(refused) == 39 and {a.headers["Retry-After"] for a in refused} == {"1"}

    async def at_one_name(client: Client) -> None:
        users.release.clear()
        for n in range(40):  # 40 sources, each with a failure of its own on record
            assert (await sign_in_from(client, f"10.1.0.{n}", f"z{n}", "wrong")).status == 401
        tries = flood(client, await login_form(client), [(f"10.1.0.{n}", "ana") for n in range(40)])
        await answered(tries, 39)  # one check at a time per name among sources that failed
        signed_in = await sign_in_from(client, "192.0.2.1", "ana", "ana-secret")
        assert signed_in.status == 303, await signed_in.text()
        users.release.set()
        statuses = [(await t).status for t in tries]
        assert statuses.count(401) == 1 and statuses.count(503) == 39

    serve(console_url, from_one_source, users=users, **BEHIND_PROXY)
    serve(console_url, at_one_name, users=users, **BEHIND_PROXY)


def test_secure_cookies_carry_the_host_prefix_and_hsts(console_url: str) -> None:
    """Review hole 4: the cookie was never Secure and there was no HSTS."""

    async def scenario(client: Client) -> None:
        page = await client.get("/login")
        cookie = page.headers["Set-Cookie"]
        assert cookie.startswith("__Host-mailbus_console_login=")
        assert "Secure" in cookie and "Path=/" in cookie and "HttpOnly" in cookie
        assert page.headers["Strict-Transport-Security"] == "max-age=31536000"

    serve(console_url, scenario, secure_cookie=True)


def test_the_proxy_header_is_believed_only_from_the_proxy(console_url: str) -> None:
    """Review hole 5: anyone reaching the port could name any user."""
    ana = {"X-Forwarded-User": "ana"}

    async def by_secret(client: Client) -> None:
        assert (await client.get("/", headers=ana, allow_redirects=False)).status == 303
        wrong = {**ana, "X-Mailbus-Proxy-Secret": "guess"}
        assert (await client.get("/", headers=wrong, allow_redirects=False)).status == 303
        right = {**ana, "X-Mailbus-Proxy-Secret": "proxy-secret"}
        assert "ana (operator)" in await (await client.get("/", headers=right)).text()

    async def by_address(client: Client, allowed: bool) -> None:
        answer = await client.get("/", headers=ana, allow_redirects=False)
        assert answer.status == (200 if allowed else 303)

    header = {"proxy_header": "X-Forwarded-User"}
    serve(console_url, by_secret, **header, proxy_secret="proxy-secret")
    serve(console_url, lambda c: by_address(c, True), **header, proxy_sources=("127.0.0.0/8",))
    serve(console_url, lambda c: by_address(c, False), **header, proxy_sources=("10.0.0.0/8",))


def upload(csrf: str, name: str, csv: bytes) -> FormData:
    form = FormData()
    form.add_field("csrf", csrf)
    form.add_field("name", name)
    form.add_field("template", "newsletter")
    form.add_field("audience", csv, filename="spring.csv", content_type="text/csv")
    return form


def audience(count: int, domain: str = "example.com") -> bytes:
    lines = ["user_id,email"] + [f"u{n},user{n}@{domain}" for n in range(count)]
    return ("\n".join(lines) + "\n").encode()


def test_an_upload_cut_off_half_way_creates_nothing(
    console_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Review hole 6: a cut-off upload became a complete campaign with a partial audience."""
    csv = audience(20_000)

    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        body = upload(csrf, "spring", csv)()
        boundary = body.content_type.split("boundary=")[1]
        data = b"".join([chunk async for chunk in _payload_bytes(body)])
        cookies = "; ".join(f"{c.key}={c.value}" for c in client.session.cookie_jar)
        _reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(
            f"POST /campaigns/new HTTP/1.1\r\nHost: {client.host}\r\nCookie: {cookies}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data[: len(data) // 2]  # half of the audience, then the connection drops
        )
        await writer.drain()
        writer.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _told(caplog) and not _campaigns(console_url):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # an import that had started would have its first part now

    serve(console_url, scenario)
    assert _told(caplog)
    assert _campaigns(console_url) == []


def test_an_upload_under_a_taken_name_is_refused_with_another_audience(
    console_url: str,
) -> None:
    """Review hole 6: a re-upload under the same name returned the first campaign."""

    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        first = await client.post("/campaigns/new", data=upload(csrf, "spring", audience(3)))
        assert "3 recipients imported" in await first.text()
        again = await client.post("/campaigns/new", data=upload(csrf, "spring", audience(3)))
        assert "3 recipients imported" in await again.text()  # the same file: that campaign
        other = await client.post(
            "/campaigns/new", data=upload(csrf, "spring", audience(3, "example.co"))
        )
        assert other.status == 400 and "is already named &#39;spring&#39;" in await other.text()

    serve(console_url, scenario)
    [(_campaign, said)] = _campaigns(console_url)
    assert said.startswith("upload: spring.csv, ") and " sha256 " in said
    assert one(console_url, "SELECT count(*) FROM campaign_recipients") == 3


def test_an_upload_over_its_limits_creates_nothing(console_url: str) -> None:
    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        rows = await client.post("/campaigns/new", data=upload(csrf, "a", audience(11)))
        assert rows.status == 413
        assert "more than 10 recipient lines (MAILBUS_CONSOLE_UPLOAD_MAX_ROWS)" in await rows.text()
        size = await client.post("/campaigns/new", data=upload(csrf, "b", audience(500)))
        assert size.status == 413
        assert "larger than 2048 bytes (MAILBUS_CONSOLE_UPLOAD_MAX_BYTES)" in await size.text()
        fits = await client.post("/campaigns/new", data=upload(csrf, "c", audience(10)))
        assert "10 recipients imported" in await fits.text()

    serve(console_url, scenario, upload_max_rows=10, upload_max_bytes=2048)
    assert [said.split(",")[0] for _, said in _campaigns(console_url)] == ["upload: spring.csv"]


def _told(caplog: pytest.LogCaptureFixture) -> bool:
    return any("upload was cut off" in r.getMessage() for r in caplog.records)


def _campaigns(database_url: str) -> list[tuple[int, str]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT id, audience FROM campaigns ORDER BY id").fetchall()


async def _payload_bytes(payload: Any) -> Any:
    class Sink:
        def __init__(self) -> None:
            self.parts: list[bytes] = []

        async def write(self, chunk: bytes) -> None:
            self.parts.append(bytes(chunk))

    sink = Sink()
    await payload.write(sink)
    for part in sink.parts:
        yield part


def test_the_upload_route_refuses_a_form_without_its_token_first(console_url: str) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ana", "ana-secret")
        plain = await client.post("/campaigns/new", data={"name": "x", "template": "t"})
        assert plain.status == 403 and "must come first" in await plain.text()
        huge = FormData()
        huge.add_field("csrf", io.BytesIO(b"x" * (1024 * 1024)), filename="t")
        assert (await client.post("/campaigns/new", data=huge)).status == 400

    serve(console_url, scenario)
    assert _campaigns(console_url) == []


def test_the_command_refuses_a_proxy_header_nobody_can_vouch_for(database_url: str) -> None:
    env = {"MAILBUS_DATABASE_URL": database_url, "MAILBUS_CONSOLE_PROXY_HEADER": "X-User"}
    refused = run_mailbus("console", env=env)
    assert refused.returncode == 2
    assert "MAILBUS_CONSOLE_PROXY_SECRET or MAILBUS_CONSOLE_PROXY_SOURCES" in refused.stderr


def test_a_body_that_cannot_be_read_answers_400_and_creates_nothing(console_url: str) -> None:
    async def scenario(client: Client) -> None:
        csrf = await sign_in(client, "ana", "ana-secret")
        part = '--xx\r\nContent-Disposition: form-data; name="{}"{}\r\n\r\n{}\r\n'
        unclosed = (  # every part, but the body ends before the closing boundary
            part.format("csrf", "", csrf)
            + part.format("name", "", "n")
            + part.format("template", "", "newsletter")
            + part.format("audience", '; filename="a.csv"', "user_id,email\n1,a@x.org")
        ).encode()
        multipart = "multipart/form-data; boundary=xx"
        for path, content_type, body in (
            ("/campaigns/new", "multipart/form-data", b"no boundary"),
            ("/campaigns/new", multipart, b"no part"),
            ("/campaigns/new", multipart, unclosed),
            ("/login", "application/x-www-form-urlencoded", b"csrf=\xff&name=\xfe"),
            ("/suppressions/add", "application/x-www-form-urlencoded", b"address=\xff@x.org"),
        ):
            answer = await client.post(path, data=body, headers={"Content-Type": content_type})
            assert answer.status == 400, (path, body[:20], answer.status)

    serve(console_url, scenario)
    assert _campaigns(console_url) == []


def test_a_flood_of_page_views_holds_no_more_connections_than_its_workers(
    console_url: str, database_url: str
) -> None:
    """Review item 22b: each page read opened a connection on the default executor, as many
    as the node's CPUs allowed; a signed-in viewer could take a share of max_connections."""
    login = console_url.split("//")[1].split(":")[0]

    def waiting() -> int:
        return int(
            one(
                database_url,
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",  # each one waits
                login,
            )
        )

    async def scenario(client: Client) -> None:
        await sign_in(client, "vic", "vic-secret")
        with psycopg.connect(database_url) as holder:
            holder.execute("LOCK TABLE console_audit IN ACCESS EXCLUSIVE MODE")
            pages = [asyncio.ensure_future(client.get("/audit")) for _ in range(12)]
            deadline = time.monotonic() + 30
            while waiting() < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # time for more to queue at the lock, were they let
            assert waiting() == 2
        assert [(await page).status for page in pages] == [200] * 12

    serve(console_url, scenario, workers=ThreadPoolExecutor(2))
