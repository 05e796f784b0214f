"""`mailbus console` in a real browser (Playwright driving Debian's Chromium), logged in to
PostgreSQL as a member of mailbus_console, where a person meets an attack: a page of a
sibling origin (same site, another port) that auto-submits multipart forms to the console
while an operator is signed in, and the cookies the browser keeps (HttpOnly, SameSite,
and with MAILBUS_CONSOLE_SECURE_COOKIE `Secure` under the `__Host-` prefix)."""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import playwright.sync_api as playwright
from e2e_stack import Stack
from relay_runner import wait_until
from transport_security import login_as

from mailbus.app.migrate import apply_roles
from mailbus.console.access import hash_password

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def attacker_site(html: str) -> Iterator[str]:
    """http://127.0.0.1:PORT/ serving ``html``: another origin of the console's site."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def forged_form(action: str, fields: dict[str, str]) -> str:
    """An auto-submitting multipart form: no preflight, no script needed by the console."""
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in fields.items())
    return (
        f'<form id="f" method="post" enctype="multipart/form-data" action="{action}">'
        f"{inputs}</form><script>document.getElementById('f').submit()</script>"
    )


def start_console(stack: Stack, database_url: str, users: Path, **env: str) -> str:
    port = free_port()
    stack.start(
        f"console-{port}",
        "console",
        MAILBUS_DATABASE_URL=database_url,
        MAILBUS_CONSOLE_LISTEN=f"127.0.0.1:{port}",
        MAILBUS_CONSOLE_USERS_FILE=str(users),
        **env,
    )
    wait_until(lambda: _answers(port), 30, "the console listening")
    return f"http://127.0.0.1:{port}"


def sign_in(page: Any, url: str) -> None:
    page.goto(f"{url}/login")
    page.get_by_label("Name").fill("ana")
    page.get_by_label("Password").fill("ana-secret")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/")


def test_a_sibling_origins_forms_and_the_cookies_in_a_real_browser(
    stack: Stack, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"ana:operator:{hash_password('ana-secret')}\n")
    apply_roles(stack.settings.database_url)
    stack.query("INSERT INTO email_suppressions (address) VALUES ('victim@x.org') RETURNING 1")
    [(campaign,)] = stack.query(
        "INSERT INTO campaigns (name, template, priority, rate_per_min, audience)"
        " VALUES ('spring', 'newsletter', 'p2', 60, 'x') RETURNING id"
    )
    with login_as(stack.settings.database_url, "mailbus_console") as console_db:
        url = start_console(stack, console_db, users)
        secure_url = start_console(stack, console_db, users, MAILBUS_CONSOLE_SECURE_COOKIE="true")
        with playwright.sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context().new_page()
            sign_in(page, url)
            [cookie] = [c for c in page.context.cookies() if c["name"] == "mailbus_console"]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

            for action, fields in (
                (f"{url}/suppressions/remove", {"address": "victim@x.org"}),
                (f"{url}/campaigns/{campaign}/cancel", {}),
            ):
                with attacker_site(forged_form(action, fields)) as evil:
                    page.goto(evil)
                    page.wait_for_url(action)
                    answer = page.locator("main").inner_text()
                    assert "another site" in answer or "urlencoded" in answer, answer

            secure = browser.new_context().new_page()
            sign_in(secure, secure_url)
            names = {c["name"]: c for c in secure.context.cookies()}
            assert names["__Host-mailbus_console"]["secure"]
            assert names["__Host-mailbus_console"]["path"] == "/"
            assert "ana (operator)" in secure.locator("header").inner_text()
            browser.close()

    assert stack.query("SELECT address FROM email_suppressions") == [("victim@x.org",)]
    assert stack.query("SELECT state FROM campaigns") == [("draft",)]
    actions = [row[0] for row in stack.query("SELECT action FROM console_audit ORDER BY id")]
    assert "campaign_cancel" not in actions and "suppress_remove" not in actions
