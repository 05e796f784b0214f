"""An unknown MAILBUS_* variable is refused with the nearest name; nothing legitimate is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings_doc import names
from mailbus.kernel.unknown_settings import TOOL_PREFIXES, TOOL_VARIABLES, check_names

REPO = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"MAILBUS_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*{])")  # not a prefix (MAILBUS_KAFKA_*)
_SOURCES = ("*.py", "*.sh", "*.yml", "*.yaml", "Makefile", "*.env", "Dockerfile")  # not prose
_SKIP = ("build", ".git", ".stack", "node_modules")
_TYPOS_ON_PURPOSE = {
    Path(__file__),
    REPO / "mailbus/kernel/unknown_settings.py",
    REPO / "tests/unit/test_exit_codes.py",  # every command refuses the same typo
}


@pytest.mark.parametrize(
    ("typo", "nearest"),
    [
        ("MAILBUS_RATELIMIT", "MAILBUS_RATE_LIMIT"),
        ("MAILBUS_DATABASE_URI", "MAILBUS_DATABASE_URL"),
        ("MAILBUS_MAX_INFLIGHT", "MAILBUS_MAX_IN_FLIGHT"),
    ],
)
def test_a_misspelt_setting_is_refused_with_the_nearest_name(typo: str, nearest: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_names(["MAILBUS_RATE_LIMIT", typo, "PATH"])
    assert str(refused.value) == f"{typo}: not a mailbus setting; did you mean {nearest}?"


def test_every_name_of_the_table_and_the_tools_passes() -> None:
    check_names([*names(), *TOOL_VARIABLES, "MAILBUS_STACK_PG_PORT", "HOME"])


def test_every_mailbus_name_the_repository_uses_is_known() -> None:
    """Code, scripts and manifests: what they set or read must not be refused."""
    used: set[str] = set()
    for path in _sources():
        if path not in _TYPOS_ON_PURPOSE:
            used.update(_NAME.findall(path.read_text(errors="ignore")))
    unknown = sorted(
        n
        for n in used
        if n not in names() and n not in TOOL_VARIABLES and not n.startswith(TOOL_PREFIXES)
    )
    assert unknown == []


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "MAILBUS_RATELIMIT",
            "5",
            "mailbus: configuration error: MAILBUS_RATELIMIT: not a mailbus setting;"
            " did you mean MAILBUS_RATE_LIMIT?",
        ),
        (
            "MAILBUS_SCHEMA_REGISTRY_URL",
            "notaurl",
            "mailbus: configuration error: MAILBUS_SCHEMA_REGISTRY_URL: expected a http://"
            " URL, got 'notaurl'",
        ),
    ],
)
def test_the_command_exits_2_with_one_line(variable: str, value: str, line: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILBUS_")}
    env[variable] = value
    run = subprocess.run(
        [sys.executable, "-m", "mailbus", "relay"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [line]


def _sources() -> Iterator[Path]:
    """The repository's files of :data:`_SOURCES`, never looking inside :data:`_SKIP`: the
    broker of a running stack deletes a topic's directory under .stack while a walk into
    it lists it (FileNotFoundError, seen in a parallel run)."""
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        for name in files:
            if any(fnmatch(name, pattern) for pattern in _SOURCES):
                yield Path(root, name)
