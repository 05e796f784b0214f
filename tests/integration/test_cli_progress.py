"""Progress of `campaign create`, `dlq replay` and `retention run`: a line redrawn on stderr
when stderr is a terminal (a pseudo-terminal here), nothing when it is a pipe; the result
on stdout either way."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import seed_dead_letters
from services import REPO, settings_env

from mailbus.kernel.settings import Settings

pytestmark = pytest.mark.stack


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run ``mailbus ARGS`` with stderr on a pseudo-terminal, stdout on a pipe."""
    leader, follower = pty.openpty()
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "mailbus", *args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(follower)
        seen = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out = run.communicate(timeout=60)[0]
    finally:
        os.close(leader)
    return run.returncode, out.decode(), seen.decode()


def _piped(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    run = subprocess.run(
        [sys.executable, "-m", "mailbus", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return run.returncode, run.stdout, run.stderr


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_progress_is_drawn_on_a_terminal_only(
    settings: Settings, tmp_path: Path, terminal: bool
) -> None:
    env = settings_env(settings, MAILBUS_OPERATOR="ana")
    run = _on_a_terminal if terminal else _piped
    audience = tmp_path / "people.csv"
    audience.write_text("user_id,email\n" + "".join(f"{n},u{n}@example.com\n" for n in range(5)))
    seed_dead_letters(settings.database_url, 3)

    window = f"retention {settings.retention / 86400:g}d:"
    commands = {
        "campaign import: 5 lines read": [
            "campaign", "create", "--name", "N", "--template", "newsletter",
            "--audience", str(audience),
        ],
        "replay [##############################] 100.0%  3/3": [
            "dlq", "replay", "--no-pace", "--why", "test",
        ],
        f"{window} 0 rows deleted": ["retention", "run"],
    }  # fmt: skip
    for drawn, args in commands.items():
        code, out, err = run(args, env)
        assert code == 0, (args, out, err)
        assert out.strip(), args  # the result, on stdout either way
        if terminal:  # redrawn in place: a carriage return, the line, clear to its end
            assert f"\r{drawn}" in err and "\x1b[K" in err, (args, err)
        else:
            assert "\r" not in err and drawn.split()[0] not in err, (args, err)
