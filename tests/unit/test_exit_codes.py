"""Every subcommand's exit status on an unreachable database (1) and on a bad setting (2),
and every ``--json`` command's errors as one JSON object on stderr
(docs/reference/cli.md#exit-statuses). The commands are found by walking the parser, so a
new one is walked too, or fails here until it is given arguments below."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mailbus.app.cli import _build_parser, main
from mailbus.app.exit_codes import Exit

UNREACHABLE = "postgresql://mailbus:mailbus@127.0.0.1:1/mailbus"  # nothing listens on port 1

# A value for each required argument, by metavar (or option).
VALUES = {
    "KEY": "some-key",
    "ID": "1",
    "ADDRESS": "ana@example.com",
    "NAME": "ana",
    "ROLE": "viewer",
    "--name": "spring",
    "--template": "newsletter",
    "--accepted": "msg-1",
}
CSV_ARGUMENTS = ("FILE.csv", "--audience")  # given a real CSV file

# Commands that never reach the database, and why (listed, never silently left out).
NO_DATABASE = {
    "completion": "reads no settings at all",
    "sandbox": "serves the fake provider; reads no database",
    "console hash-password": "hashes a password read from stdin; reads no database",
    "intake publish-sample": "writes to Kafka only (an unreachable broker exits 1 too)",
}
# Long-running services wait for a database that is not up yet (a pod may start first).
WAITS_FOR_DATABASE = {"relay", "consume", "intake", "webhooks", "console"}


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path:
        yield path, parser  # `intake` and `console` run on their own, too
    for action in subparsers:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


def _required(parser: argparse.ArgumentParser, csv: Path) -> list[str]:
    words: list[str] = []
    grouped = {id(a) for g in parser._mutually_exclusive_groups for a in g._group_actions}
    chosen = [g._group_actions[0] for g in parser._mutually_exclusive_groups if g.required]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings:
            if not (action.required or action in chosen) or (
                id(action) in grouped and action not in chosen
            ):
                continue
            option = action.option_strings[0]
            words.append(option)
            if action.nargs != 0:
                words.append(str(csv) if option in CSV_ARGUMENTS else VALUES[option])
        elif action.required:
            name = action.metavar or action.dest
            assert isinstance(name, str)
            words.append(str(csv) if name in CSV_ARGUMENTS else VALUES.get(name, "bash"))
    return words


def _commands(csv: Path) -> list[tuple[str, list[str], argparse.ArgumentParser]]:
    leaves = []
    for path, parser in _leaves(_build_parser()):
        groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if groups and groups[0].required:
            continue  # `dlq`, `send`, ... alone are usage errors
        leaves.append((" ".join(path), [*path, *_required(parser, csv)], parser))
    return leaves


@pytest.fixture
def csv(tmp_path: Path) -> Path:
    audience = tmp_path / "audience.csv"
    audience.write_text("user_id,email\n1,ana@example.com\n")
    return audience


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("MAILBUS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MAILBUS_DATABASE_URL", UNREACHABLE)
    monkeypatch.setenv("MAILBUS_KAFKA_BOOTSTRAP", "127.0.0.1:1")


def test_every_command_that_reads_the_database_exits_1_when_it_is_unreachable(
    csv: Path, environment: None, capsys: pytest.CaptureFixture[str]
) -> None:
    walked = []
    for name, argv, _ in _commands(csv):
        if name in NO_DATABASE or name in WAITS_FOR_DATABASE:
            continue
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 1 and "port 1 failed" in err, (name, code, err)
        walked.append(name)
    every = {name for name, _, _ in _commands(csv)}
    assert every - set(walked) == set(NO_DATABASE) | WAITS_FOR_DATABASE
    assert len(walked) >= 20, walked


def test_every_command_exits_2_on_a_bad_setting(
    csv: Path, environment: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("MAILBUS_RATELIMIT", "5")  # misspelt: MAILBUS_RATE_LIMIT
    for name, argv, _ in _commands(csv):
        if name == "completion":
            continue  # reads no settings, so a shell's rc file never fails
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert "did you mean MAILBUS_RATE_LIMIT?" in err, (name, err)


def test_a_malformed_setting_and_a_usage_error_exit_2(
    environment: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dlq", "list", "--limit", "many"]) == 2
    assert "argument --limit: expected a whole number" in capsys.readouterr().err
    monkeypatch.setenv("MAILBUS_DATABASE_URL", "mysql://nowhere")
    assert main(["retention", "run"]) == 2
    assert "mailbus: configuration error: MAILBUS_DATABASE_URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://mailbus:Hunter%2%Secret@127.0.0.1:1/mailbus",  # a % not written %25
        "postgresql://mailbus:Hunter2Secret@127.0.0.1:1/mailbus?fallback=on",  # no such option
        "postgresql://mailbus:Hunter2Secret@[::1:1/mailbus",  # an IPv6 address unclosed
    ],
)
def test_a_database_url_libpq_cannot_read_is_a_configuration_error_without_its_password(
    url: str, environment: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("MAILBUS_DATABASE_URL", url)
    assert main(["status", "--json"]) == 2
    err = capsys.readouterr().err
    error = _error_of(err)
    assert error["kind"] == "configuration", error
    assert str(error["message"]).startswith("MAILBUS_DATABASE_URL: "), error
    assert "Secret" not in err
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mailbus: configuration error: MAILBUS_DATABASE_URL: "), err
    assert "Secret" not in err


def test_a_settings_file_that_is_not_utf8_is_a_configuration_error(
    environment: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    latin1 = tmp_path / "latin1"
    latin1.write_bytes("postgresql://mailbus:Geheimnis\u00e4@127.0.0.1:1/mailbus".encode("latin-1"))
    assert main(["--env-file", str(latin1), "status", "--json"]) == 2
    error = _error_of(capsys.readouterr().err)
    assert str(error["message"]).startswith("--env-file: cannot read"), error
    monkeypatch.delenv("MAILBUS_DATABASE_URL")
    monkeypatch.setenv("MAILBUS_DATABASE_URL_FILE", str(latin1))
    assert main(["status", "--json"]) == 2
    error = _error_of(capsys.readouterr().err)
    assert str(error["message"]).startswith("MAILBUS_DATABASE_URL_FILE: cannot read"), error


def _json_commands(csv: Path) -> list[tuple[str, list[str]]]:
    return [
        (name, [*argv, "--json"])
        for name, argv, parser in _commands(csv)
        if any("--json" in action.option_strings for action in parser._actions)
    ]


def _error_of(stderr: str) -> dict[str, object]:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    document = json.loads(lines[0])
    assert set(document) == {"error"}, document
    error: dict[str, object] = document["error"]
    assert set(error) == {"kind", "exit", "message"}, error
    return error


def test_every_json_command_answers_its_errors_in_json(
    csv: Path, environment: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    commands = _json_commands(csv)
    assert {name for name, _ in commands} >= {
        "status", "migrate", "retention run", "retention floors", "dlq list", "dlq show",
        "dlq replay", "send show", "send resolve", "send cancel", "suppress add",
        "suppress remove", "suppress list", "suppress import", "campaign create",
        "campaign import", "campaign start", "campaign pause", "campaign resume",
        "campaign cancel", "campaign status", "campaign list", "campaign run",
    }  # fmt: skip
    for name, argv in commands:
        assert main(argv) == 1, name
        out, err = capsys.readouterr()
        assert out == "", name  # stdout carries the data document only
        error = _error_of(err)
        assert (error["kind"], error["exit"]) == ("unreachable", 1), name
        assert "port 1 failed" in str(error["message"]), name

        assert main([*argv, "--no-such-option"]) == 2, name
        error = _error_of(capsys.readouterr().err)
        assert (error["kind"], error["exit"]) == ("configuration", 2), name
        assert "unrecognized arguments: --no-such-option" in str(error["message"]), name
        abbreviated = [*(w if w != "--json" else "--js" for w in argv), "--no-such-option"]
        assert main(abbreviated) == 2, name  # argparse takes --js for --json
        assert _error_of(capsys.readouterr().err)["kind"] == "configuration", name

    monkeypatch.setenv("MAILBUS_RATELIMIT", "5")
    for name, argv in commands:
        assert main(argv) == 2, name
        error = _error_of(capsys.readouterr().err)
        assert error["kind"] == "configuration", name
        assert "did you mean MAILBUS_RATE_LIMIT?" in str(error["message"]), name


def test_help_names_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "exit status: 0 ok, 1 unreachable, 2 configuration, 3 refused" in capsys.readouterr().out


def test_the_docs_table_has_the_statuses_and_kinds_of_the_code() -> None:
    """docs/reference/cli.md#exit-statuses: one row per status, its kind as `--help` and the
    JSON error name it."""
    text = (Path(__file__).resolve().parents[2] / "docs/reference/cli.md").read_text()
    table = text.split("## Exit statuses", 1)[1].split("\n\n")[2]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert {int(status): kind.strip().strip("`") for status, kind in rows} == {
        int(code): code.name.lower() for code in Exit
    }
