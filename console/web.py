"""The console's aiohttp application: who is signed in, CSRF on every POST, rendering.

Every route but ``/login``, ``/healthz``, ``/readyz`` and ``/static`` needs a signed-in
user (:mod:`mailbus.console.access`). Every POST, whatever its content type, must come
from the console's own pages (``Origin`` and ``Sec-Fetch-Site``, where the browser sends
them) and carry the session's CSRF token in its ``csrf`` field; a multipart body is taken
only by the upload (``/campaigns/new``), whose handler checks the token as the body's first
part before anything else is read. Acting needs the operator role. A refusal is answered
403 and, for a signed-in user, written to the audit. Bodies are bounded before anyone is
signed in (``MAILBUS_CONSOLE_MAX_BODY``); sign-in is throttled per source and per name,
its password checks run on a small bounded pool (:mod:`mailbus.console.signin`), and each
failure is audited. With ``MAILBUS_CONSOLE_SECURE_COOKIE`` the cookies are ``Secure`` and
``__Host-`` prefixed and responses carry HSTS. Pages are jinja2 templates, autoescaped;
every response forbids framing and scripts (Content-Security-Policy), so the console runs
no JavaScript.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
from mailbus.console.signin import Hashing, Throttle
from mailbus.kernel.errors import MailbusError, StorageError

__all__ = [
    "CONSOLE",
    "COOKIE",
    "PROXY_SECRET_HEADER",
    "UPLOAD_PATH",
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
PROXY_SECRET_HEADER = "X-Mailbus-Proxy-Secret"
UPLOAD_PATH = "/campaigns/new"  # the one route that takes a multipart body
_PUBLIC = ("/login", "/healthz", "/readyz", "/static/")
_HSTS = "max-age=31536000"
WORKERS = 8  # threads for the pages' and actions' database work
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
    proxy_secret: str = ""  # the proxy's header is believed with this secret ...
    proxy_sources: tuple[str, ...] = ()  # ... or from these networks
    replay_rate: float | None = 5.0  # replays a second (DEFAULT_REPLAY_RATE)
    import_part: int = 50_000
    secure_cookie: bool = False
    key_prefix: str = ""  # MAILBUS_PROVIDER_KEY_PREFIX: a mail's page shows its provider key
    max_body: int = 64 * 1024
    upload_max_bytes: int = 256 * 1024**2
    upload_max_rows: int = 1_000_000
    sessions: Sessions = field(default_factory=Sessions)
    replays: ReplayJobs = field(default_factory=ReplayJobs)
    throttle: Throttle = field(default_factory=Throttle)
    hashing: Hashing = field(default_factory=Hashing)
    clock: Callable[[], float] = time.monotonic
    # The pages' and actions' database work: at most WORKERS connections besides the pool,
    # however many requests come in (a thread of the default executor each, otherwise).
    workers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(WORKERS, thread_name_prefix="console-db")
    )
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

    def cookie(self, name: str) -> str:
        """A cookie's name: ``__Host-`` prefixed when cookies are Secure."""
        return f"__Host-{name}" if self.secure_cookie else name

    def set_cookie(self, response: web.StreamResponse, name: str, value: str, **more: Any) -> None:
        response.set_cookie(
            self.cookie(name), value, httponly=True, samesite="Strict", path="/",
            secure=self.secure_cookie, **more,
        )  # fmt: skip

    def del_cookie(self, response: web.StreamResponse, name: str) -> None:
        response.del_cookie(self.cookie(name), path="/", secure=self.secure_cookie)

    def from_proxy(self, request: web.Request) -> bool:
        """Whether the request came through the trusted proxy (its secret, or its address)."""
        if self.proxy_secret:
            given = request.headers.get(PROXY_SECRET_HEADER, "")
            if secrets.compare_digest(given.encode(), self.proxy_secret.encode()):
                return True
        return _within(request.remote, self.proxy_sources)

    def source(self, request: web.Request) -> str:
        """The client's address: X-Forwarded-For's last hop when the proxy sent it."""
        forwarded = request.headers.get("X-Forwarded-For", "")
        if forwarded and _within(request.remote, self.proxy_sources):
            return forwarded.rsplit(",", 1)[-1].strip()
        return request.remote or "-"


def _within(address: str | None, networks: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net) for net in networks)


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
    """``fn(database_url, *args)`` on one of the console's worker threads (the rooms'
    functions block, each on a connection of its own: the workers bound how many)."""
    console = console_of(request)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(console.workers, fn, console.database_url, *args)


async def run_on(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(connection, *args)`` in a worker thread, on a connection of the console's pool
    (the console's own reads; the rooms' functions take ``database_url``: :func:`run`)."""
    console = console_of(request)

    def call() -> Any:
        with console.connection() as conn:
            return fn(conn, *args)

    return await asyncio.get_running_loop().run_in_executor(console.workers, call)


def _signed_in(request: web.Request) -> Session | None:
    console = console_of(request)
    if console.proxy_header:
        name = request.headers.get(console.proxy_header, "").strip()
        if not name or not console.from_proxy(request):
            return None
        return console.sessions.for_proxy(console.users.from_proxy(name))
    return console.sessions.get(request.cookies.get(console.cookie(COOKIE)))


def _cross_site(request: web.Request) -> str | None:
    """Why a POST does not come from the console's own pages, or None. Browsers send
    ``Sec-Fetch-Site`` and ``Origin`` on a form's POST; a client that sends neither still
    needs the CSRF token."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return f"the form came from another site (Sec-Fetch-Site: {site})"
    origin = request.headers.get("Origin")
    if origin is not None and origin.partition("://")[2] != request.host:
        return "the form came from another origin"
    return None


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await _guarded(request, handler)
    except web.HTTPException as exc:
        _secure_headers(request, exc)
        raise
    _secure_headers(request, response)
    return response


def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(_HEADERS)
    if console_of(request).secure_cookie:
        response.headers["Strict-Transport-Security"] = _HSTS


async def _checked(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method == "POST":
        if (why := _cross_site(request)) is not None:
            return render(request, "refused.html", code=403, why=why)
        if request.content_type == "multipart/form-data" and request.path != UPLOAD_PATH:
            return render(request, "refused.html", code=415, why="a form is sent urlencoded")
    if not request.path.startswith(_PUBLIC):
        session = _signed_in(request)
        if session is None:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            return render(request, "refused.html", code=403, why="not signed in")
        _SESSION.set(session)
        if request.method == "POST":
            if request.path != "/logout" and not session.user.can_act:
                return await refuse(request, "viewers may look, not act: an operator can")
            if request.path != UPLOAD_PATH:  # the upload checks its first part itself
                form = await request.post()
                token = form.get("csrf")
                if not session.csrf_ok(token if isinstance(token, str) else None):
                    return await refuse(request, "the form's CSRF token is missing or wrong")
    try:
        return await handler(request)
    except MailbusError as exc:
        return render(request, "refused.html", code=400, why=str(exc))


async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A body aiohttp cannot parse (no boundary, bytes that are not UTF-8, a multipart body
    cut short) answers 400, never 500."""
    try:
        return await _checked(request, handler)
    except ValueError as exc:  # aiohttp's form and multipart parsers (UnicodeDecodeError too)
        log.warning("console: %s %s: unreadable body: %s", request.method, request.path, exc)
        return render(request, "refused.html", code=400, why="the form could not be read")


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
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_static("/static/", str(_static_dir()))


def _static_dir() -> Any:
    return resources.files("mailbus.console").joinpath("static")
