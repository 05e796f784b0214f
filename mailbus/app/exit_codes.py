"""The command line's exit statuses: the one place that maps an error's kind to its code,
and says it in text or, for a command given ``--json``, as one JSON object on stderr.

    0  ok           done (a long-running command or `dlq replay`: stopped by SIGTERM/SIGINT)
    1  unreachable  PostgreSQL, Kafka or the schema registry did not answer, or failed
                    mid-way (StorageError and every other MailbusError)
    2  configuration a setting, option or argument is wrong (ConfigError, a usage error;
                    a missing extra, a broker refusing the TLS/SASL settings), or the
                    database's schema is behind this build
    3  refused      everything answered, but the state met refuses the request (RefusedError:
                    no such send, dead letter or campaign; a status that does not allow the
                    change; `retention run` still behind when its budget ran out)

docs/reference/cli.md#exit-statuses shows the same table; tests/unit/test_exit_codes.py
runs every subcommand against an unreachable database and a bad setting, and holds that
table to :class:`Exit`.
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import TextIO

from mailbus.kernel.errors import ConfigError, MailbusError, RefusedError
from mailbus.kernel.logs import redact

__all__ = ["Exit", "UsageError", "exit_for", "report", "summary"]


class Exit(IntEnum):
    OK = 0
    UNREACHABLE = 1
    CONFIGURATION = 2
    REFUSED = 3


class UsageError(ConfigError):
    """argparse's own complaint (a missing argument, an unknown option); ``usage`` is the
    command's usage line, printed before it in text."""

    def __init__(self, usage: str, problem: str) -> None:
        MailbusError.__init__(self, problem)
        self.setting, self.problem, self.usage = "usage", problem, usage


def summary() -> str:
    """One line for ``mailbus --help``: ``exit status: 0 ok, 1 unreachable, ...``."""
    codes = ", ".join(f"{code.value} {code.name.lower()}" for code in Exit)
    return f"exit status: {codes} (docs/reference/cli.md#exit-statuses)"


def exit_for(error: MailbusError) -> Exit:
    if isinstance(error, ConfigError):
        return Exit.CONFIGURATION
    if isinstance(error, RefusedError):
        return Exit.REFUSED
    return Exit.UNREACHABLE


def report(error: MailbusError, stream: TextIO, *, as_json: bool) -> Exit:
    """Write ``error`` to ``stream`` (stderr) and return its exit status. Text: one line
    (``mailbus: configuration error: …`` for configuration); JSON:
    ``{"error": {"kind": "refused", "exit": 3, "message": "…"}}``."""
    code = exit_for(error)
    message = redact(str(error))
    if as_json:
        body = {"kind": code.name.lower(), "exit": int(code), "message": message}
        stream.write(json.dumps({"error": body}) + "\n")
    elif isinstance(error, UsageError):
        stream.write(f"{error.usage}{message}\n")
    elif code is Exit.CONFIGURATION:
        stream.write(f"mailbus: configuration error: {message}\n")
    else:
        stream.write(f"mailbus: {message}\n")
    return code
