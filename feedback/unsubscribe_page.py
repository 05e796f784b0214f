"""The unsubscribe endpoint of `mailbus webhooks`: an aiohttp adapter over
:mod:`mailbus.campaigns.unsubscribe` and the suppression list.

``POST /unsubscribe/{token}`` is RFC 8058's one-click unsubscribe (the mailbox provider
posts ``List-Unsubscribe=One-Click``) and also what the confirmation page's button sends:
a valid token adds its address to ``email_suppressions`` (reason ``unsubscribed``, source
``campaign:<id>``), once; a second POST answers the same and changes nothing.

``GET /unsubscribe/{token}`` only shows a page with that button: mail scanners and link
previews fetch every link of a mail, so a GET never unsubscribes.

A token that is malformed, tampered with or signed with another secret than
``MAILBUS_UNSUBSCRIBE_SECRET`` or ``MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS`` gets 404 and
changes nothing; PostgreSQL failing gets 503 with ``Retry-After``.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from mailbus.campaigns.unsubscribe import Unsubscribe, verify_token
from mailbus.kernel.errors import StorageError

__all__ = ["Unsubscriber", "add_unsubscribe_routes"]

log = logging.getLogger("mailbus.unsubscribe")

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{title}</title></head>
<body><main><h1>{title}</h1><p>{text}</p>{form}</main></body></html>
"""
# No action: the form posts back to the URL the page was fetched at, whatever path
# prefix a reverse proxy puts in front of the receiver.
_FORM = (
    '<form method="post">'
    '<input type="hidden" name="List-Unsubscribe" value="One-Click">'
    '<button type="submit">Unsubscribe</button></form>'
)
_NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


class Unsubscriber(Protocol):
    async def unsubscribe(self, address: str, source: str) -> bool: ...


def add_unsubscribe_routes(
    app: web.Application,
    store: Unsubscriber,
    secret: str,
    clock: Callable[[], float] = time.time,
    previous: str = "",
) -> None:
    """Add the two routes to ``app``; tokens are checked against ``secret`` and, while a
    rotation settles, ``previous`` (links sent before it keep working)."""

    def valid(request: web.Request) -> Unsubscribe | None:
        return verify_token(request.match_info["token"], secret, clock(), previous=previous)

    async def confirm(request: web.Request) -> web.Response:
        who = valid(request)
        if who is None:
            return _invalid()
        return _page(
            200, "Unsubscribe", f"Stop campaign mail to {html.escape(who.address)}?", _FORM
        )

    async def unsubscribe(request: web.Request) -> web.Response:
        who = valid(request)
        if who is None:
            log.warning("unsubscribe refused: invalid token")
            return _invalid()
        try:
            added = await store.unsubscribe(who.address, who.source)
        except StorageError as exc:
            log.error("unsubscribe of a %s recipient not recorded: %s", who.source, exc)
            return _page(
                503, "Try again", "Please try again in a moment.", headers={"Retry-After": "5"}
            )
        log.info("unsubscribed a recipient of %s (%s)", who.source, "new" if added else "again")
        return _page(
            200, "Unsubscribed", f"{html.escape(who.address)} will get no more campaign mail."
        )

    app.router.add_get("/unsubscribe/{token}", confirm)
    app.router.add_post("/unsubscribe/{token}", unsubscribe)


def _invalid() -> web.Response:
    return _page(404, "Link not valid", "This unsubscribe link is not valid.")


def _page(
    status: int, title: str, text: str, form: str = "", headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        text=_PAGE.format(title=title, text=text, form=form),
        content_type="text/html",
        headers={**_NO_STORE, **(headers or {})},
    )
