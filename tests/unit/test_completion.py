"""`mailbus completion bash|zsh`: a script that sources cleanly and completes commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from services import REPO

from mailbus.app.cli import _build_parser, main

# Sources the script, then asks its completion function what follows the given words,
# the way bash's programmable completion calls it (COMP_WORDS, COMP_CWORD, $1 $2 $3).
COMPLETE = r"""
set -u
source "$1"; shift
fn=$(complete -p mailbus | sed -E 's/.* -F ([^ ]+) .*/\1/')
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
"$fn" mailbus "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def _commands() -> set[str]:
    [action] = [a for a in _build_parser()._actions if a.dest == "command"]
    return set(action.choices)  # type: ignore[arg-type]


def test_bash_script_sources_cleanly_from_the_command() -> None:
    done = subprocess.run(
        ["bash", "-c", f"set -eu; source <('{sys.executable}' -m mailbus completion bash)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["mailbus", ""], _commands()),
        (["mailbus", "d"], {"dlq"}),
        (["mailbus", "dlq", "re"], {"replay"}),
        (["mailbus", "campaign", "pa"], {"pause"}),
        (["mailbus", "consume", "--pr"], {"--priority"}),
        (["mailbus", "completion", ""], {"bash", "zsh"}),
    ],
)
def test_bash_completes_commands_and_options(
    words: list[str], expected: set[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "mailbus.bash"
    script.write_text(_script("bash", capsys))
    done = subprocess.run(
        ["bash", "-c", COMPLETE, "complete", script, *words],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    offered = set(done.stdout.split())
    assert expected <= offered
    if words[-1]:
        assert all(word.startswith(words[-1]) for word in offered)


def test_zsh_script_is_a_compdef_naming_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("zsh", capsys)
    assert script.startswith("#compdef mailbus\n")
    for command in _commands():
        assert re.search(rf"^\s+{command}:'", script, re.MULTILINE), command


def test_completion_reads_no_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAILBUS_PARTITIONS", "not a number")  # any other command exits 2
    assert "complete -o bashdefault -F" in _script("bash", capsys)


def test_unknown_shell_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "fish"]) == 2
    assert "invalid choice: 'fish'" in capsys.readouterr().err
