"""The ``mailbus campaign`` command group: parser wiring and handlers.

Only ``argparse`` is imported at start-up; each handler imports what it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mailbus.campaigns.errors import CampaignError, CampaignInputError
from mailbus.kernel.json_output import add_json_option, print_document
from mailbus.kernel.pooling import REPEATED_STATEMENT
from mailbus.kernel.settings_doc import add_command

if TYPE_CHECKING:
    from mailbus.campaigns.audience import Rejected
    from mailbus.campaigns.store import ImportReport, RecipientSource
    from mailbus.kernel.progress import TerminalProgress
    from mailbus.kernel.settings import Settings

__all__ = ["MAX_REJECTS_SHOWN", "add_campaign_commands"]

MAX_REJECTS_SHOWN = 1000  # lines printed one by one; the rest are only counted
_IMPORT_LOCK = "the import's session advisory lock"  # needs_session: docs/guides/pgbouncer.md


def _create(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.campaigns.store import CampaignSpec, create_campaign, transition

    spec = CampaignSpec(
        name=args.name,
        template=args.template,
        priority=args.priority,
        rate_per_min=args.rate,
        window=args.window,
        daily_cap=args.daily_cap,
        warmup=args.warmup or (),
        audience=args.audience or f"sql: {args.audience_sql}",
    )

    started: list[str] = []

    def created(campaign_id: int) -> None:
        _say(args, f"campaign {campaign_id} {spec.name!r} created; importing its audience")
        if args.start:  # the pacer hands out the first parts while the rest is read
            started.append(transition(settings.database_url, campaign_id, "start")[0])
            _say(args, started[-1])

    spec.check()  # before a query runs or a file is opened
    progress = _import_progress("campaign import:")
    with _opened_audience(settings, args, progress) as (audience, rejects):
        result = create_campaign(
            settings.database_url,
            spec,
            audience,
            rejects.report,
            on_created=created,
            on_part=progress.add,
            part_size=settings.campaign_import_part,
        )
    progress.finish()
    return _imported(args, result, rejects, started=bool(started))


def _say(args: argparse.Namespace, line: str) -> None:
    """A line of what is going on, on stdout as it happens; with ``--json`` the document
    at the end says it instead."""
    if not args.json:
        print(line, flush=True)


def _import(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.campaigns.store import import_audience

    progress = _import_progress(f"campaign {args.id} import:")
    with _opened_audience(settings, args, progress) as (audience, rejects):
        result = import_audience(
            settings.database_url,
            args.id,
            audience,
            rejects.report,
            on_part=progress.add,
            part_size=settings.campaign_import_part,
        )
    progress.finish()
    return _imported(args, result, rejects, started=False)


def _import_progress(label: str) -> TerminalProgress:
    """Lines read so far and their rate, on a terminal only (a part's lines at a time)."""
    from mailbus.kernel.progress import TerminalProgress

    return TerminalProgress(label, None, sys.stderr, unit="lines read")


class _Rejects:
    """Skipped lines, counted; the first ``MAX_REJECTS_SHOWN`` printed on stderr, or kept
    for the ``--json`` document (``listed``)."""

    def __init__(self, where: str, item: str, progress: TerminalProgress, as_json: bool) -> None:
        self.where, self.item, self.shown, self.progress = where, item, 0, progress
        self.listed: list[dict[str, Any]] | None = [] if as_json else None

    def report(self, rejected: Rejected) -> None:
        self.shown += 1
        if self.shown > MAX_REJECTS_SHOWN:
            return
        if self.listed is not None:
            self.listed.append({"line": rejected.line, "problem": rejected.problem})
        else:
            self.progress.interrupt()  # the line on its own, not after the progress line
            print(f"{self.where}: {self.item} {rejected.line}: {rejected.problem}", file=sys.stderr)

    def close(self) -> None:
        if self.shown > MAX_REJECTS_SHOWN and self.listed is None:
            self.progress.interrupt()
            print(
                f"{self.where}: ... and {self.shown - MAX_REJECTS_SHOWN} more {self.item}s skipped",
                file=sys.stderr,
            )


@contextlib.contextmanager
def _opened_audience(
    settings: Settings, args: argparse.Namespace, progress: TerminalProgress
) -> Iterator[tuple[RecipientSource, _Rejects]]:
    """The audience of ``--audience`` or ``--audience-sql``, opened, and its reject list."""
    from mailbus.campaigns.audience import open_audience
    from mailbus.campaigns.sql_audience import SqlAudience

    if args.audience_sql is not None:
        rejects = _Rejects("--audience-sql", "row", progress, args.json)
        with SqlAudience(settings.database_url, args.audience_sql) as query:
            yield query, rejects
    else:
        rejects = _Rejects(args.audience, "line", progress, args.json)
        try:
            stream = open(args.audience, "rb")  # noqa: SIM115 - closed below, errors named
        except OSError as exc:
            raise CampaignInputError(
                "--audience", f"cannot read {args.audience}: {exc.strerror}"
            ) from None
        with stream:
            yield open_audience(stream), rejects
    rejects.close()


def _imported(
    args: argparse.Namespace, result: ImportReport, rejects: _Rejects, *, started: bool
) -> int:
    if rejects.listed is not None:
        print_document(
            {
                "campaign_id": result.campaign_id,
                "recipients": result.recipients,
                "rejected": result.rejected,
                "rejected_lines": rejects.listed,  # the first MAX_REJECTS_SHOWN
                "completed": result.completed,  # false: cancelled during its import
                "started": started,  # by this command (create --start)
            }
        )
        return 0
    if not result.completed:
        print(f"campaign {result.campaign_id} was cancelled during its import", file=sys.stderr)
    print(
        f"campaign {result.campaign_id}: {result.recipients} recipients imported,"
        f" {result.rejected} {rejects.item}s skipped"
    )
    print(result.campaign_id)
    return 0


_ROWS_SAID = {
    "pause": "queued rows (retrying ones too), now held back",
    "resume": "held rows released",
    "cancel": "queued rows the provider cannot hold, now expired",
}


def _move(verb: str) -> Callable[[Settings, argparse.Namespace], int]:
    def handler(settings: Settings, args: argparse.Namespace) -> int:
        from mailbus.campaigns.store import transition
        from mailbus.campaigns.views import collect_status

        said, rows = transition(settings.database_url, args.id, verb)
        if args.json:
            state = collect_status(settings.database_url, args.id)["state"]
            print_document(
                {
                    "campaign_id": args.id,
                    "action": verb,
                    "state": state,
                    "message": said,
                    "rows": rows if verb in _ROWS_SAID else None,  # as the text names them
                }
            )
            return 0
        print(said)
        if verb in _ROWS_SAID:
            print(f"{_ROWS_SAID[verb]}: {rows}")
        return 0

    return handler


def _status(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.campaigns.views import collect_status, render_status

    status = collect_status(settings.database_url, args.id)
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print("\n".join(render_status(status)))
    return 0


def _list(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.campaigns.views import collect_list

    rows = collect_list(settings.database_url, args.limit)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    print(f"{'id':>6}  {'state':<10}{'recipients':>11}{'handed out':>11}{'rows':>10}  name")
    for row in rows:
        print(
            f"{row['id']:>6}  {row['state']:<10}{row['recipients']:>11}{row['processed']:>11}"
            f"{row['created_rows']:>10}  {row['name']}"
        )
    return 0


def _run(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.campaigns.pacer import Pacer
    from mailbus.campaigns.progress import Progress
    from mailbus.campaigns.store import transition
    from mailbus.campaigns.unsubscribe import Links
    from mailbus.campaigns.views import collect_status
    from mailbus.kernel.signals import stop_on_signals

    links = Links.of(settings.unsubscribe_secret, settings.unsubscribe_base_url)  # checked first
    state = collect_status(settings.database_url, args.id)["state"]
    if state == "draft":
        _say(args, transition(settings.database_url, args.id, "start")[0])
    elif state != "running":
        raise CampaignError(f"campaign {args.id} is {state}: only a draft or running one can run")
    stop = stop_on_signals()
    pacer = Pacer(
        settings.database_url, only=args.id, links=links, daily_quota=settings.campaign_daily_quota
    )
    before = collect_status(settings.database_url, args.id)
    progress = Progress(
        args.id,
        before["recipients"],
        sys.stderr,
        tty=sys.stderr.isatty() and not args.no_progress,
        clock=time.monotonic,
        already=before["handed_out"],
    )
    watch = None if args.json else progress.add_ticks  # --json: stderr is for an error only
    pacer.run(stop, until_idle=True, on_tick=watch)
    if watch is not None:
        progress.finish()
    status = collect_status(settings.database_url, args.id)
    counts = status["counts"]
    not_final = counts["queued"] + counts["sending"]
    if args.json:
        print_document(
            {
                "campaign_id": args.id,
                "state": status["state"],
                "handed_out": status["handed_out"],
                "recipients": status["recipients"],
                "not_final": not_final,
            }
        )
        return 0
    print(
        f"campaign {args.id} is {status['state']}: handed out {status['handed_out']}"
        f" of {status['recipients']}"
    )
    if status["state"] == "running":  # handed out; finished once its last mail is final
        print(f"mails not yet final: {not_final}")
    return 0


def add_campaign_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_text = "bulk campaigns: a CSV audience, paced, pausable, each recipient mailed once"
    group = add_command(commands, "campaign", help_text)
    actions = group.add_subparsers(dest="campaign_command", required=True, metavar="ACTION")

    def action(name: str, handler: Callable[..., int], text: str) -> argparse.ArgumentParser:
        sub = add_command(actions, name, text, settings_of="campaign")
        sub.set_defaults(handler=handler)
        add_json_option(sub)
        return sub

    create = action(
        "create",
        _create,
        "create a draft campaign from a CSV with the header user_id,email[,more variables]"
        " or from a SQL query over the application's tables; prints its id alone on the"
        " last line. Invalid lines are reported on stderr (with their line number; with"
        " --json in the document) and skipped; a bad header (or a query without user_id"
        " and email) imports nothing.",
    )
    create.set_defaults(needs_session=_IMPORT_LOCK)
    create.add_argument("--name", required=True, help="a name for people")
    create.add_argument("--template", required=True, help="the template of every mail")
    _audience_options(create)
    create.add_argument(
        "--priority", choices=("p0", "p1", "p2"), default="p2", help="default p2 (bulk)"
    )
    create.add_argument(
        "--rate",
        type=_option(_rate),
        default=600,
        metavar="N/min",
        help="recipients handed out per minute (also N/s, N/h; default 600/min)",
    )
    create.add_argument(
        "--window",
        type=_option(_window),
        metavar="HH:MM-HH:MM",
        help="hand out only inside this daily window (UTC; may wrap midnight)",
    )
    create.add_argument(
        "--daily-cap", type=_option(_positive), metavar="N", help="at most N recipients per UTC day"
    )
    create.add_argument(
        "--warmup",
        type=_option(_warmup),
        metavar="N1,N2,...",
        help="warm-up: at most N1 recipients on the first UTC day, N2 on the"
        " second, ...; then only --daily-cap",
    )
    create.add_argument(
        "--start",
        action="store_true",
        help="start it at once: the pacer hands out the first parts of the audience while"
        " the rest is imported",
    )
    resume_import = action(
        "import",
        _import,
        "go on with a campaign's audience import that stopped (a crash, a kill) from its"
        " last committed part; give the same --audience or --audience-sql as at create",
    )
    resume_import.set_defaults(needs_session=_IMPORT_LOCK)
    resume_import.add_argument(
        "id", type=_option(_positive), metavar="ID", help="the campaign's id"
    )
    _audience_options(resume_import)
    for verb, text in (
        ("start", "start a draft campaign: `mailbus relay` then hands it out at its pace"),
        (
            "pause",
            "pause a running campaign (also one handed out whose mail is not all final):"
            " once this returns no new row is created and none of its mail is sent"
            " (calls in flight aside), retrying rows included",
        ),
        ("resume", "resume a paused campaign where it stopped (held rows are released)"),
        (
            "cancel",
            "cancel a campaign whose mail is not all final: no new row is created and"
            " none of its mail is sent again (calls in flight aside); recipients not yet"
            " handed out show as cancelled, queued rows end expired (a row the provider"
            " may hold, once a look-up says it was not accepted)",
        ),
    ):
        sub = action(verb, _move(verb), text)
        sub.add_argument("id", type=_option(_positive), metavar="ID", help="the campaign's id")
    status = action("status", _status, "one campaign's recipients by state")
    status.add_argument("id", type=_option(_positive), metavar="ID", help="the campaign's id")
    listing = action("list", _list, "campaigns, newest first")
    listing.add_argument("--limit", type=_option(_positive), default=50, help="default 50")
    run = action(
        "run",
        _run,
        "pace one campaign in the foreground until it is handed out, paused or cancelled"
        " (starts a draft); it is finished once its last mail is final. Not needed while"
        " `mailbus relay` runs, which paces every running campaign",
    )
    run.set_defaults(needs_session=REPEATED_STATEMENT)  # the pacer's round per tick
    run.add_argument("id", type=_option(_positive), metavar="ID", help="the campaign's id")
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar on a terminal (plain lines every 10 s instead, as when"
        " stderr is not a terminal)",
    )


def _audience_options(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--audience", metavar="FILE.csv", help="the recipients")
    source.add_argument(
        "--audience-sql",
        metavar="QUERY",
        help="the recipients as a query over the application's tables in mailbus's"
        ' database, e.g. "SELECT id AS user_id, email, first_name FROM users WHERE'
        ' opted_in"; read in pages ordered by user_id (index it), in read-only'
        " snapshots",
    )


def _option(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def wrapped(text: str) -> Any:
        try:
            return parse(text)
        except CampaignInputError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None

    return wrapped


def _rate(text: str) -> int:
    from mailbus.campaigns.pacing import parse_rate

    return parse_rate(text)


def _window(text: str) -> Any:
    from mailbus.campaigns.pacing import parse_window

    return parse_window(text)


def _warmup(text: str) -> tuple[int, ...]:
    from mailbus.campaigns.pacing import parse_warmup

    return parse_warmup(text)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise CampaignInputError("ID", f"expected a whole number >= 1, got {text!r}")
    return int(text)
