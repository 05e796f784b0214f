"""`--env-file` is parsed by python-dotenv: quotes, comments, `export`, no expansion."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mailbus.app.cli import main
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import load_env_file, load_settings


def parse(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    path = tmp_path / ".env"
    path.write_text(text)
    env = {} if environ is None else environ
    load_env_file(path, env)
    return env


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("A=plain", "plain"),
        ("A = spaced ", "spaced"),
        ("export A=exported", "exported"),
        ('A="double quoted # not a comment"', "double quoted # not a comment"),
        ("A='single quoted # not a comment'", "single quoted # not a comment"),
        ("A=unquoted # a comment", "unquoted"),
        ("A=p#ss", "p#ss"),  # '#' without a space before it is part of the value
        ('A="with \\"escaped\\" quotes"', 'with "escaped" quotes'),
        ("A='it\\'s'", "it's"),
        ('A="line one\\nline two"', "line one\nline two"),
        ("A='no \\n escape in single quotes'", "no \\n escape in single quotes"),
        (
            "A=postgresql://u:p%40ss@db:5432/x?sslmode=verify-full",
            "postgresql://u:p%40ss@db:5432/x?sslmode=verify-full",
        ),
        ("A=pa$$word${HOME}", "pa$$word${HOME}"),  # no expansion: passwords stay intact
        ('A="pa$word"', "pa$word"),
        ("A=", ""),
        ('A=""', ""),
        ("A=a=b=c", "a=b=c"),
    ],
)
def test_values(tmp_path: Path, line: str, value: str) -> None:
    assert parse(tmp_path, line + "\n") == {"A": value}


def test_comments_blank_lines_and_multiline_values(tmp_path: Path) -> None:
    text = '# settings\n\n  # indented comment\nA=1\r\nB="first\nsecond"\nexport C=3 # why\n'
    assert parse(tmp_path, text) == {"A": "1", "B": "first\nsecond", "C": "3"}


def test_the_environment_wins(tmp_path: Path) -> None:
    env = {"A": "from env"}
    assert parse(tmp_path, "A=from file\nB=2\n", env) == {"A": "from env", "B": "2"}


def test_a_later_line_overrides_an_earlier_one(tmp_path: Path) -> None:
    assert parse(tmp_path, "A=1\nA=2\n") == {"A": "2"}


@pytest.mark.parametrize(
    ("text", "line"),
    [("A=1\nJUST_A_NAME\n", 2), ("A=1\nB=2\nthis is not a setting\n", 3), ('A="unclosed\n', 1)],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    env: dict[str, str] = {}
    with pytest.raises(ConfigError) as error:
        parse(tmp_path, text, env)
    assert f".env:{line}" in str(error.value)
    assert env == {}  # nothing half-applied


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--env-file"):
        load_env_file(tmp_path / "absent.env", {})


def test_cli_bad_value_from_env_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAILBUS_MAX_IN_FLIGHT", "placeholder")
    monkeypatch.delenv("MAILBUS_MAX_IN_FLIGHT")  # restored to absent afterwards
    (tmp_path / ".env").write_text("export MAILBUS_MAX_IN_FLIGHT='0'  # too few\n")
    assert main(["--env-file", str(tmp_path / ".env"), "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "MAILBUS_MAX_IN_FLIGHT" in err
    assert os.environ["MAILBUS_MAX_IN_FLIGHT"] == "0"


def test_cli_bad_env_file_line_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".env").write_text("NOT A LINE\n")
    assert main(["--env-file", str(tmp_path / ".env"), "status"]) == 2
    assert ".env:1: " in capsys.readouterr().err


def test_bad_log_level_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAILBUS_LOG_LEVEL", "LOUD")
    assert main(["status"]) == 2
    assert "MAILBUS_LOG_LEVEL" in capsys.readouterr().err


def test_database_url_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "database-url"
    secret.write_text("postgresql://app:s3cret@db.internal:5432/mailbus\n")
    settings = load_settings({"MAILBUS_DATABASE_URL_FILE": str(secret)})
    assert settings.database_url == (
        "postgresql://app:s3cret@db.internal:5432/mailbus?options=-csearch_path%3Dmailbus%2Cpublic"
    )
    with pytest.raises(ConfigError, match="MAILBUS_DATABASE_URL_FILE"):
        load_settings({"MAILBUS_DATABASE_URL_FILE": str(tmp_path / "absent")})
    secret.write_text("mysql://nope\n")
    with pytest.raises(ConfigError, match="MAILBUS_DATABASE_URL"):
        load_settings({"MAILBUS_DATABASE_URL_FILE": str(secret)})
