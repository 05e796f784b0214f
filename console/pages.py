"""The console's pages (GET): overview, a mail's story, dead letters, campaigns,
suppressions and the audit. Each reads through the rooms' own functions in a worker thread."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mailbus.campaigns.views import COUNTS, collect_list, collect_status
from mailbus.console import audit, figures
from mailbus.console.web import console_of, render, run, run_on, session_of
from mailbus.consumer import send_admin
from mailbus.consumer.dead_letter_admin import connect_store, replay_candidates
from mailbus.consumer.dead_letter_views import PRIORITIES, LetterFilter, replay_summary
from mailbus.feedback import suppressions

__all__ = ["add_pages", "letter_filter", "suppressions_page"]

STATES = ("pending", "sending", "unknown", "accepted", "failed", "expired", "suppressed")
OPEN_STATES = STATES[:3]  # counted exactly; the others are estimated on a large table
LIST_LIMIT = 200


async def overview(request: web.Request) -> web.Response:
    status = await run_on(request, console_of(request).overview)
    return render(
        request,
        "overview.html",
        status=status,
        rates=status["rates"],
        states=STATES,
        open_states=OPEN_STATES,
        priorities=PRIORITIES,
    )


async def mail(request: web.Request) -> web.Response:
    key = request.query.get("key", "").strip()
    text = request.query.get("q", "").strip()
    matches: list[dict[str, Any]] = []
    if not key and text:
        matches = await run_on(request, figures.find_keys, text)
        if len(matches) == 1:
            key = matches[0]["dedupe_key"]
    prefix = console_of(request).key_prefix
    story = await run(request, _shown_story, key, prefix) if key else None
    variables = story.send["variables"] if story else []
    return render(
        request, "mail.html", q=text or key, matches=matches, story=story, variables=variables
    )


def _shown_story(database_url: str, key: str, key_prefix: str) -> send_admin.SendStory:
    return send_admin.story(database_url, key, key_prefix, payload=False)


def letter_filter(values: Any) -> tuple[LetterFilter, str]:
    """The dead-letter filter of a query or form (the CLI's own parsing), and it in words."""
    chosen = {k: (values.get(k) or "").strip() or None for k in ("reason", "priority", "template")}
    since = (values.get("since") or "").strip() or None
    where = LetterFilter.from_options(
        chosen["reason"],
        chosen["priority"],
        chosen["template"],
        since,
        include_replayed=values.get("all") == "1",
    )
    words = [f"{k} {v}" for k, v in {**chosen, "since": since}.items() if v]
    return where, ", ".join(words) or "every dead letter not replayed"


async def dead_letters(request: web.Request) -> web.Response:
    where, what = letter_filter(request.query)

    def read(database_url: str) -> tuple[Any, int]:
        with connect_store(database_url) as store:
            return store.find(where, LIST_LIMIT)

    letters, total = await run(request, read)
    return render(
        request,
        "dead_letters.html",
        letters=letters,
        total=total,
        what=what,
        query=request.query,
        jobs=console_of(request).replays.recent(),
        csrf=session_of(request).csrf,
    )


async def dead_letter(request: web.Request) -> web.Response:
    letter_id = int(request.match_info["id"])

    def read(database_url: str) -> dict[str, Any]:
        with connect_store(database_url) as store:
            return store.story(letter_id, raw=False)  # the stored Kafka value: not for a page

    story = await run(request, read)
    return render(request, "dead_letter.html", story=story)


async def replay_dry_run(request: web.Request) -> web.Response:
    """What a replay of the filter would do, and the form that confirms it."""
    where, what = letter_filter(request.query)

    def read(database_url: str) -> tuple[Any, Any]:
        with connect_store(database_url) as store:
            return replay_candidates(store, where)

    chosen, skipped = await run(request, read)
    return render(
        request,
        "replay.html",
        chosen=chosen,
        summary=replay_summary(len(chosen), skipped, dry_run=True),
        what=what,
        query=request.query,
        csrf=session_of(request).csrf,
    )


async def campaigns(request: web.Request) -> web.Response:
    rows = await run(request, collect_list, 50)
    await run_on(request, figures.campaign_progress, rows)
    return render(request, "campaigns.html", campaigns=rows)


async def campaign(request: web.Request) -> web.Response:
    campaign_id = int(request.match_info["id"])
    status = await run(request, collect_status, campaign_id)
    feedback = await run_on(request, figures.campaign_feedback, campaign_id)
    return render(
        request,
        "campaign.html",
        c=status,
        feedback=feedback,
        counts=COUNTS,
        csrf=session_of(request).csrf,
    )


async def campaign_form(request: web.Request) -> web.Response:
    return render(request, "campaign_new.html", csrf=session_of(request).csrf, result=None)


async def suppression_list(request: web.Request) -> web.Response:
    return await suppressions_page(request, request.query.get("q", "").strip())


async def suppressions_page(request: web.Request, text: str, said: str = "") -> web.Response:
    entries = await run(request, suppressions.search, text) if text else []
    return render(
        request,
        "suppressions.html",
        q=text,
        entries=entries,
        stops=suppressions.stops,
        csrf=session_of(request).csrf,
        said=said,
    )


async def audit_page(request: web.Request) -> web.Response:
    return render(request, "audit.html", rows=await run(request, audit.recent, 200))


def add_pages(app: web.Application) -> None:
    app.router.add_get("/", overview)
    app.router.add_get("/mail", mail)
    app.router.add_get("/dead-letters", dead_letters)
    app.router.add_get("/dead-letters/replay", replay_dry_run)
    app.router.add_get(r"/dead-letters/{id:\d+}", dead_letter)
    app.router.add_get("/campaigns", campaigns)
    app.router.add_get("/campaigns/new", campaign_form)
    app.router.add_get(r"/campaigns/{id:\d+}", campaign)
    app.router.add_get("/suppressions", suppression_list)
    app.router.add_get("/audit", audit_page)
