"""The console's aiohttp application: who is signed in, CSRF on every POST, rendering.

Every route but ``/login``, ``/healthz``, ``/readyz`` and ``/static`` needs a signed-in
user (:mod:`mailbus.console.access`); a POST needs the session's CSRF token in its
``csrf`` field (a multipart upload carries it as its first part, checked by the handler
before the file is read) and the operator role. A refusal is answered 403 and, for a
signed-in user, written to the audit. Pages are jinja2 templates, autoescaped; responses
forbid framing and scripts (Content-Security-Policy), so the console runs no JavaScript.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2
import psycopg
from aiohttp import web
from psycopg_pool import ConnectionPool

from mailbus.console import audit
from mailbus.console.access import Session, Sessions, Users
from mailbus.console.replays import ReplayJobs
from mailbus.kernel.errors import MailbusError, StorageError

__all__ = [
    "CONSOLE",
    "COOKIE",
    "Console",
    "add_routes",
    "console_of",
    "guard",
    "refuse",
    "render",
    "run",
    "run_on",
    "session_of",
]

log = logging.getLogger("mailbus.console")

COOKIE = "mailbus_console"
_LOGIN_COOKIE = "mailbus_console_login"  # the login form's own CSRF token (double submit)
_PUBLIC = ("/login", "/healthz", "/readyz", "/static/")
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'none'; frame-ancestors 'none';"
    " form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Console:
    """What the handlers need, injected by the composition root (mailbus.app.cli)."""

    database_url: str
    users: Users
    overview: Callable[[psycopg.Connection[Any]], dict[str, Any]]  # mailbus.app.overview
    proxy_header: str = ""
    replay_rate: float | None = 5.0  # replays a second (DEFAULT_REPLAY_RATE)
    import_part: int = 50_000
    secure_cookie: bool = False
    key_prefix: str = ""  # MAILBUS_PROVIDER_KEY_PREFIX: a mail's page shows its provider key
    sessions: Sessions = field(default_factory=Sessions)
    replays: ReplayJobs = field(default_factory=ReplayJobs)
    # Opened by `mailbus console` at start, closed at its stop (console/server.py); without
    # one (an application made in a test) each read opens a connection of its own.
    pool: ConnectionPool | None = None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the pool (checked first: one the server dropped is replaced),
        or a new one; psycopg errors become :class:`StorageError`."""
        try:
            if self.pool is None:
                with psycopg.connect(self.database_url, connect_timeout=5) as conn:
                    yield conn
            else:
                with self.pool.connection() as conn:
                    yield conn
        except psycopg.Error as exc:
            raise StorageError(f"database: {exc}") from exc


CONSOLE: web.AppKey[Console] = web.AppKey("console", Console)
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("mailbus.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE]


# The signed-in session of the request being handled (each request runs in its own task).
_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar("session", default=None)


def session_of(_request: web.Request) -> Session:
    session = _SESSION.get()
    assert session is not None  # guard() let the request through
    return session


def render(request: web.Request, template: str, code: int = 200, **values: Any) -> web.Response:
    session = _SESSION.get()
    text = _TEMPLATES.get_template(template).render(session=session, path=request.path, **values)
    return web.Response(text=text, status=code, content_type="text/html")


async def refuse(request: web.Request, why: str) -> web.Response:
    """403, and the refusal in the audit when someone is signed in."""
    session = _SESSION.get()
    if session is not None:
        await run(request, audit.record, session.user, "refused", request.path, 0, why)
    return render(request, "refused.html", code=403, why=why)


async def run(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(database_url, *args)`` in a worker thread (the rooms' functions block)."""
    return await asyncio.to_thread(fn, console_of(request).database_url, *args)


async def run_on(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(connection, *args)`` in a worker thread, on a connection of the console's pool
    (the console's own reads; the rooms' functions take ``database_url``: :func:`run`)."""
    console = console_of(request)

    def call() -> Any:
        with console.connection() as conn:
            return fn(conn, *args)

    return await asyncio.to_thread(call)


def _signed_in(request: web.Request) -> Session | None:
    console = console_of(request)
    if console.proxy_header:
        name = request.headers.get(console.proxy_header, "").strip()
        return console.sessions.for_proxy(console.users.from_proxy(name)) if name else None
    return console.sessions.get(request.cookies.get(COOKIE))


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith(_PUBLIC):
        session = _signed_in(request)
        if session is None:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            return render(request, "refused.html", code=403, why="not signed in")
        _SESSION.set(session)
        if request.method == "POST" and request.path != "/logout":
            if not session.user.can_act:
                return await refuse(request, "viewers may look, not act: an operator can")
            if request.content_type != "multipart/form-data":
                form = await request.post()
                token = form.get("csrf")
                if not session.csrf_ok(token if isinstance(token, str) else None):
                    return await refuse(request, "the form's CSRF token is missing or wrong")
    try:
        response = await handler(request)
    except MailbusError as exc:
        response = render(request, "refused.html", code=400, why=str(exc))
    response.headers.update(_HEADERS)
    return response


async def _login_form(request: web.Request) -> web.Response:
    # The token already given stays (a second tab, the browser's favicon fetch redirected
    # here): a new one each time would expire the form on screen.
    token = request.cookies.get(_LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = render(request, "login.html", csrf=token, error=None)
    response.set_cookie(_LOGIN_COOKIE, token, httponly=True, samesite="Strict", max_age=3600)
    return response


async def _login(request: web.Request) -> web.Response:
    console = console_of(request)
    form = await request.post()
    expected = request.cookies.get(_LOGIN_COOKIE, "")
    token = str(form.get("csrf", ""))
    if not expected or not secrets.compare_digest(token.encode(), expected.encode()):
        return render(request, "refused.html", code=403, why="the login form expired: reload")
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    user = await asyncio.to_thread(console.users.check_password, name, password)
    if user is None:
        log.warning("console: failed sign-in for %r", name[:64])
        return render(request, "login.html", code=401, csrf=token, error="wrong name or password")
    response = web.HTTPSeeOther("/")
    response.set_cookie(
        COOKIE,
        console.sessions.open(user),
        httponly=True,
        samesite="Strict",
        secure=console.secure_cookie,
    )
    response.del_cookie(_LOGIN_COOKIE)
    await run(request, audit.record, user, "login")
    raise response


async def _logout(request: web.Request) -> web.Response:
    console_of(request).sessions.close(request.cookies.get(COOKIE))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE)
    raise response


async def _healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    def ping(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT 1")

    try:
        await run_on(request, ping)
    except StorageError:
        return web.json_response({"status": "database unavailable"}, status=503)
    return web.json_response({"status": "ready"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/login", _login_form)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_static("/static/", str(_static_dir()))


def _static_dir() -> Any:
    return resources.files("mailbus.console").joinpath("static")
