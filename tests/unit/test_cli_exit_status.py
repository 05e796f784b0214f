"""The command line's exit status when the database cannot be reached: 1 for every command
(docs/reference/stability.md: 1 unreachable, 2 bad configuration), never the 2 of a
configuration error, so a script can tell a typo from an outage."""

from __future__ import annotations

import os
import socket

import pytest

from mailbus.app.cli import main


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns


@pytest.mark.parametrize(
    "argv",
    [["migrate", "--status"], ["migrate", "--dry-run"], ["migrate", "--skip-topics"]],
)
def test_an_unreachable_database_exits_1(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("MAILBUS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MAILBUS_DATABASE_URL", f"postgresql://u:p@127.0.0.1:{closed_port()}/x")
    assert main(argv) == 1
    assert "configuration error" not in capsys.readouterr().err
