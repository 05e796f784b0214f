"""One table documents every MAILBUS_* setting; each command's --help lists what it uses."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from mailbus.app.cli import _build_parser, main
from mailbus.kernel.settings import load_settings
from mailbus.kernel.settings_doc import SETTINGS, epilog, markdown, names
from mailbus.kernel.unknown_settings import TOOL_PREFIXES, TOOL_VARIABLES

REPO = Path(__file__).resolve().parents[2]
# Packages whose MAILBUS_* names must all be documented (add new top-level packages here).
SCANNED = (
    "client",
    "mailbus",
    "relay",
    "consumer",
    "sandbox",
    "schemas",
    "feedback",
    "intake",
    "campaigns",
)


class RecordingEnv(Mapping[str, str]):
    """An empty environment that remembers every variable asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return default

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_variable_load_settings_reads_is_documented() -> None:
    env = RecordingEnv()
    load_settings(env)
    assert len(env.asked) >= 25  # the recording works
    # OpenTelemetry's own variables, read only to turn the export on (docs/guides/tracing.md)
    standard = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
    assert env.asked - names() - standard == set()


def test_every_mailbus_name_in_the_code_is_documented() -> None:
    found = {
        name
        for package in SCANNED
        for path in (REPO / package).rglob("*.py")
        for name in re.findall(r"\bMAILBUS_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())
    }
    assert len(found) >= 20
    tools = {n for n in found if n in TOOL_VARIABLES or n.startswith(TOOL_PREFIXES)}
    assert found - names() - tools == set()  # the tools' own: mailbus/kernel/unknown_settings


def test_committed_configuration_reference_is_generated() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == markdown(), "docs/configuration.md is stale: run `make docs`"
    assert all(f"`{setting.name}`" in committed for setting in SETTINGS)


def test_table_has_no_duplicates_and_names_real_commands() -> None:
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)
    known = {"migrate", "relay", "consume", "intake", "webhooks", "status", "dlq", "sandbox"}
    known |= {"campaign", "suppress", "send", "retention", "console"}
    for setting in SETTINGS:
        assert setting.commands <= known, setting.name


def subcommands() -> dict[str, object]:
    parser = _build_parser()
    [action] = [a for a in parser._actions if a.dest == "command"]
    return dict(action.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_command_help_lists_its_settings(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    if command == "completion":  # prints a script from the parser alone
        assert "MAILBUS_" not in out and "reads no settings" in out
        return
    assert "MAILBUS_DATABASE_URL(*)" in out
    assert "MAILBUS_LOG_LEVEL" in out
    for setting in SETTINGS:
        named = re.search(rf"{setting.name}(?![A-Z0-9_])", out) is not None  # not a prefix
        assert named == setting.used_by(command), (command, setting.name)


def test_consume_help_names_its_provider_settings() -> None:
    text = epilog("consume")
    assert "MAILBUS_PROVIDER_API_KEY(*)" in text
    assert "MAILBUS_RATE_LIMIT" in text
    assert "MAILBUS_RELAY_BATCH_SIZE" not in text
    assert "MAILBUS_RELAY_BATCH_SIZE" in epilog("relay")


def test_top_level_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(setting.name in out for setting in SETTINGS)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"mailbus {metadata.version('mailbus')}"
