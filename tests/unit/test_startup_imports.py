"""A command starts without what it does not use: every `mailbus` process (and every
operator's `mailbus status` at 3 a.m.) paid ~0.6 s of CPU for the sandbox's provider
imitations and the schema registry's HTTP client before it did anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("mailbus.sandbox", "confluent_kafka.schema_registry", "authlib")

PROBE = """
import sys
from mailbus.app.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = {heavy!r}
print(sorted(m for m in sys.modules if m.startswith(heavy)))
"""


def imported_by(*words: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *words],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["relay", "consume", "status", "intake"])
def test_a_command_imports_neither_the_sandbox_nor_the_registry_client(command: str) -> None:
    assert imported_by(command, "--help") == "[]"


def test_the_processes_import_no_registry_client_until_a_registry_is_configured() -> None:
    probe = (
        "import sys, mailbus.relay.relay, mailbus.relay.p0_process, mailbus.consumer.runner,"
        " mailbus.intake.app; print(sorted(m for m in sys.modules"
        " if m.startswith(('confluent_kafka.schema_registry', 'authlib'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_sandbox_command_still_has_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mailbus", "sandbox", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--fault SPEC" in done.stdout and "--events-to URL" in done.stdout
