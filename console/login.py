"""Signing in and out of the console (docs/guides/console.md#access).

The sign-in form carries its own CSRF token (a double-submit cookie); its body is bounded
like every other (``MAILBUS_CONSOLE_MAX_BODY``) and must be urlencoded. A try waits while
its source, or its name from that source, has failed too often, or its name has from
everywhere and its source has failed too (:class:`mailbus.console.signin.Throttle`: a
source with a clean record is never held by failures of others). Its password is checked
on the small bounded, fair pool (:class:`mailbus.console.signin.Hashing`: 503 beyond it),
and a failure is written to the audit (``login_failed``, role ``none``).
"""

from __future__ import annotations

import logging
import secrets

from aiohttp import web

from mailbus.console import audit
from mailbus.console.access import User
from mailbus.console.signin import Busy, source_key
from mailbus.console.web import COOKIE, console_of, render, run

__all__ = ["add_login"]

log = logging.getLogger("mailbus.console")

_LOGIN_COOKIE = "mailbus_console_login"  # the login form's own CSRF token (double submit)


async def _login_form(request: web.Request) -> web.Response:
    # The token already given stays (a second tab, the browser's favicon fetch redirected
    # here): a new one each time would expire the form on screen.
    console = console_of(request)
    token = request.cookies.get(console.cookie(_LOGIN_COOKIE)) or secrets.token_urlsafe(24)
    response = render(request, "login.html", csrf=token, error=None)
    console.set_cookie(response, _LOGIN_COOKIE, token, max_age=3600)
    return response


async def _login(request: web.Request) -> web.Response:
    console = console_of(request)
    if request.content_type != "application/x-www-form-urlencoded":
        return render(request, "refused.html", code=415, why="a form is sent urlencoded")
    form = await request.post()  # at most MAILBUS_CONSOLE_MAX_BODY (413 beyond)
    expected = request.cookies.get(console.cookie(_LOGIN_COOKIE), "")
    token = str(form.get("csrf", ""))
    if not expected or not secrets.compare_digest(token.encode(), expected.encode()):
        return render(request, "refused.html", code=403, why="the login form expired: reload")
    name, password = str(form.get("name", ""))[:200], str(form.get("password", ""))
    source, now = console.source(request), console.clock()
    counted = source_key(source)  # an IPv6 address's /64
    wait = console.throttle.wait_s(counted, name, now)
    if wait > 0:
        return _too_soon(request, token, 429, wait, "too many failed sign-ins")
    clean = console.throttle.clean(counted, now)
    try:
        user = await console.hashing.run(
            lambda: console.users.check_password(name, password), counted, name, clean
        )
    except Busy:
        return _too_soon(request, token, 503, 1, "too many sign-ins at once")
    if user is None:
        console.throttle.failed(counted, name, console.clock())
        log.warning("console: failed sign-in for %r from %s", name[:64], source)
        await run(request, audit.record, User(name[:64], "none"), "login_failed", source)
        return render(request, "login.html", code=401, csrf=token, error="wrong name or password")
    console.throttle.succeeded(counted, name)
    response = web.HTTPSeeOther("/")
    console.set_cookie(response, COOKIE, console.sessions.open(user))
    console.del_cookie(response, _LOGIN_COOKIE)
    await run(request, audit.record, user, "login", source)
    raise response


def _too_soon(request: web.Request, token: str, code: int, wait: float, why: str) -> web.Response:
    seconds = max(1, round(wait))
    response = render(
        request, "login.html", code=code, csrf=token, error=f"{why}: try again in {seconds} s"
    )
    response.headers["Retry-After"] = str(seconds)
    return response


async def _logout(request: web.Request) -> web.Response:
    console = console_of(request)
    console.sessions.close(request.cookies.get(console.cookie(COOKIE)))
    response = web.HTTPSeeOther("/login")
    console.del_cookie(response, COOKIE)
    raise response


def add_login(app: web.Application) -> None:
    app.router.add_get("/login", _login_form)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
