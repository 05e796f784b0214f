"""The console's actions (POST, operators only, CSRF-checked by :func:`mailbus.console.web.guard`):
replay dead letters, create and move campaigns, add and remove suppressions. Each goes
through the rooms' own functions and writes one console_audit row saying how many mails it
touched."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import IO, Any

from aiohttp import BodyPartReader, web

from mailbus.campaigns.audience import Rejected, open_audience
from mailbus.campaigns.commands import MAX_REJECTS_SHOWN
from mailbus.campaigns.errors import CampaignError
from mailbus.campaigns.store import (
    TRANSITIONS,
    CampaignSpec,
    ImportReport,
    create_campaign,
    transition,
)
from mailbus.console import audit
from mailbus.console.pages import letter_filter, suppressions_page
from mailbus.console.upload import UploadRefused, field_text, receive
from mailbus.console.web import console_of, refuse, render, run, session_of
from mailbus.feedback import suppressions

__all__ = ["add_actions"]

log = logging.getLogger("mailbus.console")

UPLOAD_CHUNK = 64 * 1024


async def replay(request: web.Request) -> web.Response:
    form = await request.post()
    where, what = letter_filter(form)
    limit = str(form.get("limit", ""))
    if not limit.isdigit():
        return render(request, "refused.html", code=400, why="limit: the dry run's count")
    console, user = console_of(request), session_of(request).user
    job = await asyncio.to_thread(
        console.replays.start,
        console.database_url,
        user,
        where,
        what,
        int(limit),
        console.replay_rate,
    )
    raise web.HTTPSeeOther(f"/dead-letters?replay={job.id}")


async def move_campaign(request: web.Request) -> web.Response:
    campaign_id, verb = int(request.match_info["id"]), request.match_info["verb"]
    if verb not in TRANSITIONS:
        raise web.HTTPNotFound()
    try:
        said, rows = await run(request, transition, campaign_id, verb)
    except CampaignError as exc:
        said, rows = str(exc), 0
    await run(request, audit.record, session_of(request).user, f"campaign_{verb}",
              str(campaign_id), rows, said)  # fmt: skip
    raise web.HTTPSeeOther(f"/campaigns/{campaign_id}")


async def create(request: web.Request) -> web.Response:
    """A campaign from a multipart form: ``csrf`` first, then the fields, then the CSV,
    received whole (console/upload.py), then imported with the same checks and per-line
    errors as the CLI. An upload cut off or over a limit creates nothing."""
    if request.content_type != "multipart/form-data":
        return await refuse(request, "the form's CSRF token must come first")
    console = console_of(request)
    reader = await request.multipart()
    fields: dict[str, str] = {}
    csrf = await reader.next()
    if not isinstance(csrf, BodyPartReader) or csrf.name != "csrf":
        return await refuse(request, "the form's CSRF token must come first")
    if not session_of(request).csrf_ok(await field_text(_chunks(csrf), console.max_body)):
        return await refuse(request, "the form's CSRF token is missing or wrong")
    part = await reader.next()
    while isinstance(part, BodyPartReader) and part.name != "audience" and len(fields) < 20:
        fields[part.name or ""] = (await field_text(_chunks(part), console.max_body)).strip()
        part = await reader.next()
    if not isinstance(part, BodyPartReader) or part.name != "audience":
        return _form_again(request, fields, "choose the audience CSV file")
    try:
        spec = CampaignSpec(
            name=fields.get("name", ""),
            template=fields.get("template", ""),
            priority=fields.get("priority") or "p2",
            rate_per_min=int(fields.get("rate") or 600),
        )
        spec.check()
    except (CampaignError, ValueError) as exc:
        return _form_again(request, fields, str(exc))
    try:
        received = await receive(_chunks(part), console.upload_max_bytes, console.upload_max_rows)
    except UploadRefused as exc:
        return _form_again(request, fields, str(exc), code=413)
    except asyncio.CancelledError:  # the client went away (aiohttp cancels the handler)
        log.warning("console: an upload was cut off: nothing created")
        raise
    except (ConnectionError, EOFError, ValueError, web.HTTPException) as exc:
        log.warning("console: an upload was cut off (%s): nothing created", exc)
        return _form_again(request, fields, "the upload was cut off: nothing was created")
    rejects: list[Rejected] = []

    def import_it(audience_csv: IO[bytes]) -> ImportReport:
        with audience_csv:  # closed before its reader (a TextIOWrapper, a local) is dropped
            audience = open_audience(audience_csv)
            return create_campaign(
                console.database_url,
                dataclasses.replace(spec, audience=received.audience(part.filename or "audience")),
                audience,
                lambda rejected: (
                    rejects.append(rejected) if len(rejects) < MAX_REJECTS_SHOWN else None
                ),
                part_size=console.import_part,
            )

    try:
        if await reader.next() is not None:  # the body's closing boundary: all was sent
            received.file.close()
            raise UploadRefused("the audience must be the form's last field")
        report = await asyncio.to_thread(import_it, received.file)
    except (CampaignError, UploadRefused) as exc:
        received.file.close()
        return _form_again(request, fields, str(exc))
    except ValueError:  # no closing boundary: the body ended before the form did
        received.file.close()
        raise
    user = session_of(request).user
    said = f"{report.recipients} recipients imported, {report.rejected} lines skipped"
    await run(request, audit.record, user, "campaign_create", str(report.campaign_id),
              report.recipients, said)  # fmt: skip
    return render(
        request,
        "campaign_new.html",
        csrf=session_of(request).csrf,
        result={"report": report, "rejects": rejects, "said": said},
        fields=fields,
    )


async def _chunks(part: BodyPartReader) -> Any:
    while chunk := await part.read_chunk(UPLOAD_CHUNK):
        yield chunk


def _form_again(
    request: web.Request, fields: dict[str, str], error: str, code: int = 400
) -> web.Response:
    return render(
        request,
        "campaign_new.html",
        code=code,
        csrf=session_of(request).csrf,
        result=None,
        fields=fields,
        error=error,
    )


async def suppress_add(request: web.Request) -> web.Response:
    form = await request.post()
    address, reason = str(form.get("address", "")), str(form.get("reason") or "manual")
    user = session_of(request).user
    normalised, new, scope = await run(
        request, suppressions.add, address, reason, f"console:{user.name}"
    )
    said = (
        f"{normalised}: {'suppressed' if new else 'already suppressed'} (reason: {reason};"
        f" stops {suppressions.stops(scope)})"
    )
    await run(request, audit.record, user, "suppress_add", normalised, 0, said)
    return await suppressions_page(request, normalised, said)


async def suppress_remove(request: web.Request) -> web.Response:
    form = await request.post()
    address = str(form.get("address", "")).strip()
    removed = await run(request, suppressions.remove, address)
    said = f"{address.lower()}: " + (
        "removed from the suppression list" if removed else "was not suppressed; nothing removed"
    )
    await run(request, audit.record, session_of(request).user, "suppress_remove",
              address.lower(), 0, said)  # fmt: skip
    return await suppressions_page(request, address, said)


def add_actions(app: web.Application) -> None:
    app.router.add_post("/dead-letters/replay", replay)
    app.router.add_post("/campaigns/new", create)
    app.router.add_post(r"/campaigns/{id:\d+}/{verb}", move_campaign)
    app.router.add_post("/suppressions/add", suppress_add)
    app.router.add_post("/suppressions/remove", suppress_remove)
