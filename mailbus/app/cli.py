"""The `mailbus` command line: the composition root that wires settings to services."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mailbus.app.exit_codes import Exit, UsageError, report, summary
from mailbus.kernel.errors import ConfigError, MailbusError, RefusedError, StorageError
from mailbus.kernel.garbage import tune_collector
from mailbus.kernel.json_output import add_json_option, print_document
from mailbus.kernel.logs import configure_logging, register_secret
from mailbus.kernel.pooling import REPEATED_STATEMENT
from mailbus.kernel.settings import Settings, load_env_file, load_settings
from mailbus.kernel.settings_doc import add_command
from mailbus.kernel.settings_doc import epilog as settings_epilog
from mailbus.kernel.signals import stop_on_signals
from mailbus.kernel.tracers import configured_tracer
from mailbus.kernel.unknown_settings import check_names
from mailbus.kernel.version import installed_version

if TYPE_CHECKING:
    from mailbus.app.migrate_waits import LockWait
    from mailbus.consumer.dead_letter_views import LetterFilter

__all__ = ["DEFAULT_RETENTION_BUDGET_S", "RETENTION_BEHIND", "main"]

RETENTION_BEHIND = Exit.REFUSED  # `retention run` spent its budget still behind its windows
DEFAULT_RETENTION_BUDGET_S = 50 * 60.0  # an hourly schedule leaves slack for the next run


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status by the kind of error (mailbus/app/exit_codes.py)."""
    words = list(sys.argv[1:] if argv is None else argv)
    # the sandbox's options import every provider's imitation (~0.3 s of a start): only
    # a command line that may name it, or a completion script, needs them
    parser = _build_parser(sandbox_options=not {"sandbox", "completion"}.isdisjoint(words))
    try:
        args = parser.parse_args(words)
    except UsageError as exc:  # a command given --json (or --js, argparse's abbreviation)
        asks_json = any(w.startswith("--j") and "--json".startswith(w) for w in words)
        return report(exc, sys.stderr, as_json=asks_json)  # hears of its typo in JSON too
    if args.command == "completion":  # reads no settings, so a shell's rc file never fails
        import shtab

        print(shtab.complete(parser, shell=args.shell))
        return Exit.OK
    try:
        return _run(args)
    except MailbusError as exc:
        return report(exc, sys.stderr, as_json=getattr(args, "json", False))


def _run(args: argparse.Namespace) -> int:
    if args.env_file:
        load_env_file(Path(args.env_file), os.environ)
    check_names(os.environ)  # a misspelt MAILBUS_* variable: exit 2, nearest name
    _configure_logging()
    settings = load_settings()
    register_secret(settings.provider_api_key)
    register_secret(settings.fallback_provider_api_key)
    register_secret(settings.webhook_secret)
    register_secret(settings.schema_registry_auth)
    register_secret(settings.unsubscribe_secret)
    register_secret(settings.unsubscribe_secret_previous)
    for secret in settings.kafka_security.secrets:
        register_secret(secret)
    needs_session = getattr(args, "needs_session", None)  # docs/guides/pgbouncer.md
    if needs_session is not None and settings.database_transaction_pooling:
        raise ConfigError(
            "MAILBUS_DATABASE_TRANSACTION_POOLING",
            f"this command needs a database session of its own ({needs_session}), which"
            " transaction pooling does not keep: give it a direct or session-pooled"
            " MAILBUS_DATABASE_URL, without this setting",
        )
    check_options = getattr(args, "check_options", None)
    if check_options is not None:  # an option's own error comes before the schema's
        check_options(args)
    if getattr(args, "checks_schema", True):  # every command that reads the database
        from mailbus.app.migrate import check_schema  # (after its options' errors)

        until = stop_on_signals() if getattr(args, "long_running", False) else None
        if not check_schema(settings.database_url, until, settings.db_schema):  # behind: exit 2
            return Exit.OK  # stopped while it waited for the database
    if not getattr(args, "long_running", False):
        return int(args.handler(settings, args))
    from mailbus.app.database_probe import database_probe
    from mailbus.app.migration_files import available_migrations
    from mailbus.kernel import health, schema_guard

    health.probe("database round trip", database_probe(settings.database_url))  # /readyz
    # every new connection judged too: a database restored or failed over behind the build
    schema_guard.arm((m.version for m in available_migrations()), schema=settings.db_schema)
    try:
        return int(args.handler(settings, args))
    finally:
        reason = schema_guard.tripped()
        schema_guard.disarm()
        if reason is not None:  # it stopped the process as SIGTERM does: exit 2
            raise ConfigError("MAILBUS_DATABASE_URL", reason)


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as :class:`UsageError`, so they exit 2 through
    :func:`report` like every other error (in JSON for a command given ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.format_usage(), f"{self.prog}: error: {message}")


def _configure_logging() -> None:
    level = os.environ.get("MAILBUS_LOG_LEVEL", "").strip().upper() or "INFO"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError(
            "MAILBUS_LOG_LEVEL", f"expected DEBUG, INFO, WARNING or ERROR, got {level!r}"
        )
    configure_logging(level)


def _check_kafka(settings: Settings) -> None:
    """A refused password or unverifiable broker: exit 2 now, not retries for ever."""
    from mailbus.app.kafka_probe import check_kafka_access

    check_kafka_access(settings)


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.app.migrate import LockWait, apply_migrations
    from mailbus.app.migrate_report import applied_lines
    from mailbus.kernel.topics import ensure_topics

    wait = LockWait(lock_timeout_s=args.lock_timeout, max_wait_s=args.max_wait)
    if args.status or args.dry_run:
        return _migrate_plan(settings, args, wait)
    run: dict[str, Any] = {"roles": None, "topics_created": None, "schema_registry": None}
    run["applied"] = apply_migrations(
        settings.database_url,
        schema=settings.db_schema,
        allow_locking=args.allow_locking,
        wait=wait,
    )
    if args.roles:
        from mailbus.app.migrate import apply_roles

        run["roles"] = list(apply_roles(settings.database_url, settings.db_schema))
    if not args.skip_topics:
        _check_kafka(settings)
        run["topics_created"] = ensure_topics(settings)
    if settings.schema_registry_url is not None:
        from mailbus.schemas.registry import register_shipped

        intake_topic = os.environ.get("MAILBUS_INTAKE_TOPIC") or "orders.events"
        run["schema_registry"] = register_shipped(settings, intake_topic)
    _print_report(args, run, applied_lines)
    return 0


def _migrate_plan(settings: Settings, args: argparse.Namespace, wait: LockWait) -> int:
    """``migrate --status`` / ``--dry-run``: read the recorded versions, change nothing;
    name how each pending migration is applied: what it locks, and how long it may wait."""
    import psycopg

    from mailbus.app.migrate import schema_state
    from mailbus.app.migrate_report import plan_document, plan_lines

    try:
        state = schema_state(settings.database_url, schema=settings.db_schema)
    except psycopg.OperationalError as exc:
        raise StorageError(f"cannot reach the database: {exc}") from None  # exit 1
    plan = plan_document(state, wait, dry_run=args.dry_run, roles=args.roles)
    _print_report(args, plan, plan_lines)
    return 0


def _print_report(
    args: argparse.Namespace,
    document: dict[str, Any],
    lines: Callable[[dict[str, Any]], list[str]],
) -> None:
    """A command's result: with ``--json`` the document itself on stdout (its shape:
    docs/reference/cli.md#json-documents), else its lines."""
    if args.json:
        print_document(document)
    else:
        print("\n".join(lines(document)))


def _relay(settings: Settings, _args: argparse.Namespace) -> int:
    from mailbus.app.migration_files import available_migrations
    from mailbus.campaigns.pacer import start_pacer_thread
    from mailbus.relay.p0_process import P0LaneProcess
    from mailbus.relay.relay import EVENTS, Relay
    from mailbus.relay.workers import PointerWorkers

    _check_kafka(settings)
    stop = stop_on_signals()
    tracer = configured_tracer(settings.otel_exporter, "mailbus-relay")
    # MAILBUS_RELAY_WORKERS pointer-lane workers, not woken by new P0 sends: the P0 lane below
    # takes those
    relay = PointerWorkers(settings, tracer=tracer, p0_lane_apart=True)
    events = Relay(settings, lanes=frozenset({EVENTS}))  # outcome events, never in the way
    events_thread = threading.Thread(
        target=events.run, args=(stop,), name="relay-events", daemon=True
    )
    # P0 alone, in a process of its own: a password reset never waits behind a batch of
    # newsletters, nor for the GIL its workers hold (relay/p0_process.py)
    p0 = P0LaneProcess(settings, tuple(m.version for m in available_migrations()))
    p0_thread = threading.Thread(target=p0.run, args=(stop,), name="relay-p0", daemon=True)
    pacer = start_pacer_thread(settings, stop)  # paces running campaigns (campaigns/pacer.py)
    if settings.metrics_port is not None:
        from mailbus.kernel.metrics import start_metrics_server
        from mailbus.relay.outbox_metrics import OutboxCollector

        start_metrics_server(settings.metrics_port, OutboxCollector(settings.database_url))
    tune_collector()  # batches of rows, not a heap walk per 120 rows (kernel/garbage.py)
    events_thread.start()
    p0_thread.start()
    relay.run(stop)
    for thread in (events_thread, p0_thread):
        thread.join(timeout=70)  # a pass cut short is published again by the next relay
    pacer.join(timeout=10)
    stats = relay.stats + p0.stats
    logging.getLogger("mailbus.relay").info(
        "relay stopped: %d published in %d batches, %d dead letters, %d outcome events",
        stats.published,
        stats.batches,
        stats.dead_letters,
        events.stats.send_events,
        extra={
            "published": stats.published,
            "batches": stats.batches,
            "dead_letters": stats.dead_letters,
            "outcome_events": events.stats.send_events,
        },
    )
    return 0


def _consume(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.consumer.runner import run_consumer
    from mailbus.providers.registry import senders

    _check_kafka(settings)
    providers = senders()
    tune_collector()  # start-up's imports frozen; in-flight mails are no heap walk per 700 objects
    return run_consumer(settings, args.priority, providers)


def _intake(settings: Settings, _args: argparse.Namespace) -> int:
    from mailbus.intake.app import run_intake
    from mailbus.intake.config import IntakeConfig

    _check_kafka(settings)
    level = os.environ.get("MAILBUS_LOG_LEVEL", "INFO").upper()
    return run_intake(settings, IntakeConfig.from_environ(settings), level)


def _intake_publish_sample(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.intake.config import IntakeConfig
    from mailbus.intake.sample import publish_sample

    _check_kafka(settings)
    config = IntakeConfig.from_environ(settings)
    return publish_sample(settings, config.topic, args.count, args.duplicates, args.malformed)


def _sandbox(_settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.sandbox.server import main as sandbox_main

    return sandbox_main(args)


def _no_sandbox(_settings: Settings, _args: argparse.Namespace) -> int:
    raise ConfigError(
        "mailbus sandbox",
        "not part of a release: run it from a checkout or the image's sandbox target"
        " (docs/installation.md#the-sandbox)",
    )


def _status(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.app.status import print_status

    return print_status(settings, as_json=args.json)


def _dlq_where(args: argparse.Namespace) -> LetterFilter:
    """The dead letters ``--reason/--priority/--template/--since`` name (ConfigError: exit 2)."""
    from mailbus.consumer.dead_letter_views import LetterFilter

    return LetterFilter.from_options(
        args.reason, args.priority, args.template, args.since,
        include_replayed=getattr(args, "all", False),
    )  # fmt: skip


def _dlq_options(args: argparse.Namespace) -> None:
    """Every dlq option's error, before the command reads the database."""
    from mailbus.consumer.dead_letter_views import parse_letter_id
    from mailbus.kernel.durations import parse_rate

    if hasattr(args, "id"):
        parse_letter_id(args.id)
        return
    _dlq_where(args)
    if not getattr(args, "no_pace", True):
        parse_rate(args.rate)


def _dlq_list(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.consumer.dead_letter_admin import print_list

    return print_list(settings, _dlq_where(args), args.limit or None, as_json=args.json)


def _dlq_show(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.consumer.dead_letter_admin import print_show
    from mailbus.consumer.dead_letter_views import parse_letter_id

    return print_show(settings, parse_letter_id(args.id), as_json=args.json)


def _dlq_replay(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.consumer.dead_letter_admin import run_replay
    from mailbus.intake.config import IntakeConfig
    from mailbus.intake.replay import EventReplayer
    from mailbus.kernel.durations import parse_rate

    where = _dlq_where(args)
    rate = None if args.no_pace else parse_rate(args.rate)
    return run_replay(
        settings,
        where,
        why=args.why,
        rate=rate,
        dry_run=args.dry_run,
        limit=args.limit,
        stop=stop_on_signals(),
        intake=EventReplayer.from_settings(settings, IntakeConfig.from_environ(settings)),
        as_json=args.json,
    )


def _send(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.consumer import send_admin

    if args.send_command == "show":
        return send_admin.print_show(settings, args.key, as_json=args.json)
    if args.send_command == "cancel":
        return send_admin.run_change(settings, args.key, "cancelled", as_json=args.json)
    if args.accepted is not None:
        return send_admin.run_change(
            settings, args.key, "accepted", args.accepted, as_json=args.json
        )
    return send_admin.run_change(settings, args.key, "not_sent", as_json=args.json)


def _retention(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.app import retention_report as reports
    from mailbus.app.retention_horizons import replay_horizons
    from mailbus.consumer import retention

    retention.refuse_short_window(settings.retention, replay_horizons(settings, os.environ))
    windows = retention.Windows.of(settings)
    if args.dry_run:
        left = retention.count_past_retention(settings.database_url, windows)
        _print_report(args, reports.dry_run_document(windows, left), reports.run_lines)
        return 0
    from mailbus.kernel.progress import TerminalProgress

    window = f"{settings.retention / 86400:g}d"
    progress = TerminalProgress(f"retention {window}:", None, sys.stderr, unit="rows deleted")
    done, left = retention.prune(
        settings.database_url, windows, args.batch, args.budget, on_batch=progress.add
    )
    progress.finish()  # a terminal only: a Job's log has the lines below
    run = reports.run_document(windows, done, left, args.budget)
    _print_report(args, run, reports.run_lines)
    if run["caught_up"]:
        return 0
    if args.json:  # the document above says what was done; stderr why it exits 3
        report(RefusedError(reports.behind_message(run)), sys.stderr, as_json=True)
    return RETENTION_BEHIND


def _retention_floors(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.app.retention_report import floors_document, floors_lines
    from mailbus.consumer import retention

    if args.set:
        from mailbus.app.retention_horizons import replay_horizons

        retention.refuse_short_window(settings.retention, replay_horizons(settings, os.environ))
        floors = retention.set_floors(settings.database_url, retention.Windows.of(settings))
    else:
        floors = retention.read_floors(settings.database_url)
    _print_report(args, floors_document(floors, pinned=args.set), floors_lines)
    return 0


def _webhooks(settings: Settings, _args: argparse.Namespace) -> int:
    from mailbus.feedback.server import run_webhooks
    from mailbus.providers.registry import receivers

    return run_webhooks(settings, receivers(settings))


def _console(settings: Settings, args: argparse.Namespace) -> int:
    if args.console_command == "hash-password":
        from mailbus.console.access import ROLES, hash_password

        if args.role not in ROLES:
            raise ConfigError("ROLE", "expected viewer or operator")
        import getpass

        password = getpass.getpass() if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
        if not password:
            raise ConfigError("PASSWORD", "must not be empty")
        print(f"{args.name}:{args.role}:{hash_password(password)}")
        return 0
    from mailbus.app.overview import overview_on
    from mailbus.console.server import run_console

    return run_console(settings, overview_on)


def _suppress(settings: Settings, args: argparse.Namespace) -> int:
    from mailbus.feedback import suppressions

    if args.suppress_command == "add":
        source = args.source or "cli"
        return suppressions.run_add(settings, args.address, args.reason, source, args.json)
    if args.suppress_command == "remove":
        return suppressions.run_remove(settings, args.address, as_json=args.json)
    if args.suppress_command == "list":
        return suppressions.run_list(settings, as_json=args.json)
    source = args.source or "import"
    return suppressions.run_import(settings, args.file, args.reason, source, args.json)


def _add_sandbox_command(
    command: Callable[..., argparse.ArgumentParser], with_options: bool
) -> None:
    """The fake provider of the tests and the demo: in a checkout, not in the wheel. Its
    options only ``with_options``: a parser for any other command lists it by name."""
    text = "run the fault-injectable sandbox email API (a checkout only)"
    if not with_options:
        command("sandbox", _sandbox, text)
        return
    if importlib.util.find_spec("mailbus.sandbox") is None:
        absent = command("sandbox", _no_sandbox, text)
        absent.add_argument("options", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        absent.set_defaults(checks_schema=False)
        return
    from mailbus.sandbox.server import add_arguments as add_sandbox_arguments

    sandbox = command("sandbox", _sandbox, text)
    sandbox.set_defaults(checks_schema=False)
    add_sandbox_arguments(sandbox)


def _build_parser(sandbox_options: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(
        prog="mailbus",
        description=f"Exactly-once email over a PostgreSQL outbox and Kafka.\n{summary()}",
        epilog=settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mailbus {installed_version()}")
    parser.add_argument(
        "--env-file",
        help="read KEY=VALUE settings from this .env-style file first (the environment wins)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        sub = add_command(commands, name, help_text)
        sub.set_defaults(handler=handler)
        return sub

    migrate = command("migrate", _migrate, "create or upgrade the schema and the topics")
    migrate.set_defaults(checks_schema=False, needs_session="a session advisory lock")
    migrate.add_argument("--skip-topics", action="store_true", help="only the database schema")
    plan = migrate.add_mutually_exclusive_group()
    plan.add_argument(
        "--status",
        action="store_true",
        help="print the database's schema version, applied and pending migrations; change nothing",
    )
    plan.add_argument(
        "--dry-run", action="store_true", help="print what would be applied; apply nothing"
    )
    migrate.add_argument(
        "--allow-locking",
        action="store_true",
        help="apply a migration that stops writes to a table while it runs (marked locking;"
        " --status names them) on a database that holds sends",
    )
    migrate.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=0.05,
        metavar="SECONDS",
        help="how long each try of a migration waits for a lock; writers queued behind it"
        " wait no longer (default 0.05)",
    )
    migrate.add_argument(
        "--max-wait",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long a migration keeps trying (backing off) while long transactions hold"
        " the locks it needs; then exit 1 naming them (default 300)",
    )
    migrate.add_argument(
        "--roles",
        action="store_true",
        help="also create the NOLOGIN group roles mailbus_enqueuer, _relay, _consumer, _intake,"
        " _webhooks, _operator and _retention and set their grants (needs CREATEROLE)",
    )
    add_json_option(migrate)
    relay = command("relay", _relay, "publish committed outbox rows to Kafka (long-running)")
    relay.set_defaults(long_running=True, needs_session="LISTEN, and a session SET")
    consume = command("consume", _consume, "deliver queued mail to the email API (long-running)")
    consume.set_defaults(long_running=True)
    consume.add_argument(
        "--priority",
        type=_priorities,
        default=["p0", "p1", "p2"],
        help="p0, p1, p2 or a comma list (default: all three)",
    )
    status = command("status", _status, "queue depth, oldest pending age, failures")
    add_json_option(status)
    _add_dlq_commands(commands)
    _add_send_commands(commands)
    _add_retention_commands(commands)
    _add_feedback_commands(commands)
    _add_intake_commands(commands)
    _add_console_command(commands)
    from mailbus.campaigns.commands import add_campaign_commands

    add_campaign_commands(commands)
    _add_sandbox_command(command, sandbox_options)
    text = "print a shell completion script (bash or zsh)"
    completion = commands.add_parser(
        "completion",
        help=text,
        description=text,
        epilog="reads no settings. bash: source <(mailbus completion bash) in ~/.bashrc;"
        ' zsh: mailbus completion zsh > "${fpath[1]}/_mailbus"',
    )
    completion.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _add_dlq_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from mailbus.consumer.dead_letter_views import (
        DEFAULT_REPLAY_RATE,  # pure, standard library only
    )

    help_text = "inspect and replay dead letters"
    dlq = add_command(commands, "dlq", help_text)
    actions = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")

    def action(name: str, handler: Callable[..., int], text: str) -> argparse.ArgumentParser:
        sub = add_command(actions, name, text, settings_of="dlq")
        sub.set_defaults(handler=handler, check_options=_dlq_options)
        return sub

    def filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--reason", help="rejected, max_attempts, undecodable, ... (comma list)")
        sub.add_argument("--priority", help="p0, p1, p2 or a comma list")
        sub.add_argument("--template", help="template name (comma list)")
        sub.add_argument(
            "--since", metavar="TIME", help="ISO-8601 time (naive = UTC) or an age: 30m, 2h, 7d"
        )

    listing = action("list", _dlq_list, "list dead letters, newest first")
    filters(listing)
    listing.add_argument("--all", action="store_true", help="include those already replayed")
    listing.add_argument(
        "--limit", type=_count, default=50, help="at most this many (default 50, 0 = all)"
    )
    add_json_option(listing)
    show = action("show", _dlq_show, "one dead letter: its error, origin and attempt history")
    show.add_argument("id", metavar="ID", help="the dead letter's id (see `dlq list`)")
    add_json_option(show)
    replay = action(
        "replay",
        _dlq_replay,
        "put the sends of matching dead letters back to pending (P0 first, oldest first);"
        " without filters, every dead letter not yet replayed",
    )
    filters(replay)
    replay.add_argument(
        "--rate",
        metavar="N/min",
        default=DEFAULT_REPLAY_RATE,
        help=f"at most N replays a minute (default {DEFAULT_REPLAY_RATE}; 0: unpaced)",
    )
    replay.add_argument(
        "--no-pace", action="store_true", help="replay as fast as possible (as --rate 0)"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed, change nothing"
    )
    replay.add_argument(
        "--why", default="manual replay", help="reason recorded in the audit (email_replays)"
    )
    replay.add_argument("--limit", type=_count, default=None, help="replay at most this many")
    replay.set_defaults(needs_session=REPEATED_STATEMENT)  # a transaction per dead letter
    add_json_option(replay)


def _add_send_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "one mail by its dedupe key: its story, settle it when unknown, stop it when pending"
    send = add_command(commands, "send", text)
    actions = send.add_subparsers(dest="send_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=_send)
        sub.add_argument("key", metavar="KEY", help="the send's dedupe key")
        add_json_option(sub)
        return sub

    action("show", "the row, its attempts, delivery events, dead letters, resolutions")
    resolve = action(
        "resolve",
        "settle a send in `unknown` after asking the provider (audited in"
        " email_send_resolutions, by MAILBUS_OPERATOR or the OS user)",
    )
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--accepted", metavar="MESSAGE_ID", help="the provider accepted it under this id"
    )
    outcome.add_argument(
        "--not-sent",
        action="store_true",
        help="the provider never accepted it: sent again under the same key, recorded as"
        " at_least_once (were it accepted after all, it goes out twice)",
    )
    action(
        "cancel",
        "stop a pending send no call was made for: it ends expired and never goes out"
        " (a send already claimed or tried is not touched; audited)",
    )


def _add_retention_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = (
        "delete settled mail, ended campaigns and console audit past their windows"
        " (MAILBUS_RETENTION*, docs/retention.md)"
    )
    group = add_command(commands, "retention", text)
    group.set_defaults(needs_session=REPEATED_STATEMENT)  # a statement per batch or table
    actions = group.add_subparsers(dest="retention_command", required=True, metavar="ACTION")
    run_text = (
        "delete, in batches, settled sends (with their attempts and dead letters), dead"
        " letters, delivery events, ended campaigns with their recipients and console audit"
        " past their windows; never a row that is not final. Exit 0 caught up,"
        f" {RETENTION_BEHIND} when the budget ran out still behind, 2 for a window shorter"
        " than a replay horizon or not the database's floor (`retention floors`)"
    )
    run = actions.add_parser("run", help=run_text, description=run_text)
    run.set_defaults(handler=_retention)
    run.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    add_json_option(run)
    run.add_argument(
        "--batch", type=_positive, default=1000, help="rows per transaction (default 1000)"
    )
    run.add_argument(
        "--budget",
        type=_budget,
        default=DEFAULT_RETENTION_BUDGET_S,
        help="go on until nothing is past a window or this much time is spent (default 50m);"
        f" exit {RETENTION_BEHIND} when it ran out still behind",
    )
    floors_text = (
        "show each table's floor, the least window the database lets retention use; with"
        " --set (as the operator) pin them to MAILBUS_RETENTION* (2 for a window shorter"
        " than a replay horizon)"
    )
    floors = actions.add_parser("floors", help=floors_text, description=floors_text)
    floors.set_defaults(handler=_retention_floors)
    floors.add_argument(
        "--set", action="store_true", help="pin the floors to the configured windows"
    )
    add_json_option(floors)


def _add_feedback_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "receive signed delivery events at POST /webhooks/{provider} (long-running)"
    webhooks = add_command(
        commands, "webhooks", text, description=text + "; /healthz and /readyz beside it"
    )
    webhooks.set_defaults(handler=_webhooks, long_running=True)
    text = "manage email_suppressions (addresses stored lower-cased, compared case-insensitively)"
    suppress = add_command(commands, "suppress", text)
    actions = suppress.add_subparsers(dest="suppress_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = add_command(actions, name, help_text, settings_of="suppress")
        sub.set_defaults(handler=_suppress)
        add_json_option(sub)
        return sub

    add = action("add", "suppress one address (again: its reason is updated)")
    add.add_argument("address", metavar="ADDRESS")
    add.add_argument(
        "--reason",
        default="manual",
        help="why (default: manual); 'complaint' and 'unsubscribed' stop bulk mail only"
        " (campaigns, the bulk policy's templates), any other reason stops all mail",
    )
    add.add_argument("--source", default=None, help="who (default: cli)")
    remove = action("remove", "take an address off the list (every capitalisation of it)")
    remove.add_argument("address", metavar="ADDRESS")
    action("list", "every suppressed address with reason, source, time and scope (all or bulk)")
    imports = action(
        "import",
        "add the addresses of a CSV with a header row email[,reason]; invalid lines are"
        " reported with their line numbers and skipped",
    )
    imports.set_defaults(needs_session=REPEATED_STATEMENT)  # an INSERT per batch of lines
    imports.add_argument("file", metavar="FILE.csv")
    imports.add_argument("--reason", default="manual", help="for rows without one (manual)")
    imports.add_argument("--source", default=None, help="who (default: import)")


def _add_console_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "serve the operator's web console (long-running; docs/guides/console.md)"
    console = add_command(
        commands, "console", text, description=text + "; /healthz and /readyz beside it"
    )
    console.set_defaults(
        handler=_console, long_running=True, needs_session="an upload's session advisory lock"
    )
    actions = console.add_subparsers(dest="console_command", metavar="[hash-password]")
    text = "print a users-file line NAME:ROLE:argon2 hash for a password read from stdin"
    hashing = actions.add_parser("hash-password", help=text, description=text)
    hashing.set_defaults(checks_schema=False, long_running=False, needs_session=None)
    hashing.add_argument("name", metavar="NAME")
    hashing.add_argument("role", metavar="ROLE", help="viewer or operator")


def _add_intake_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:

    help_text = "run the domain-event intake: OrderPlaced and mapped events -> email_sends rows"
    intake = add_command(
        commands,
        "intake",
        help_text,
        description=help_text + " (long-running; stops cleanly on SIGTERM/SIGINT)",
    )
    intake.set_defaults(handler=_intake, long_running=True)
    actions = intake.add_subparsers(dest="intake_command", metavar="[publish-sample]")
    text = "publish sample OrderPlaced events (plus duplicates and malformed ones) to the topic"
    sample = add_command(actions, "publish-sample", text, settings_of="intake")
    sample.set_defaults(handler=_intake_publish_sample, checks_schema=False, long_running=False)
    sample.add_argument("--count", type=_count, default=10, help="distinct orders (default 10)")
    sample.add_argument(
        "--duplicates", type=_count, default=3, help="events sent twice (default 3)"
    )
    sample.add_argument(
        "--malformed", type=_count, default=1, help="values that are not Avro (default 1)"
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _budget(text: str) -> float:
    from mailbus.kernel.durations import parse_duration

    if text.strip() in ("0", "0s"):
        return 0.0  # one batch of each table: what a pass does before it looks at the clock
    try:
        return parse_duration(text, "--budget")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _priorities(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    if not chosen or any(p not in ("p0", "p1", "p2") for p in chosen):
        raise argparse.ArgumentTypeError(f"expected p0, p1, p2 or a comma list, got {text!r}")
    return list(dict.fromkeys(chosen))
