"""Optional dependencies (docs/installation.md#extras): the core runs without them, and a
command that needs one it lacks exits 2 naming the extra. Each case runs in a subprocess
whose import system refuses the extras' modules, as a core-only install would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from services import REPO

# The extras' top-level modules (and sendgrid, which no install needs any more).
BLOCKED = (
    "boto3", "botocore", "svix", "faust", "mode", "aiokafka", "argon2", "sendgrid",
    "opentelemetry",
)  # fmt: skip

_HOOK = f"""
import sys

class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Refuse())
"""

# Every module a core command imports, with the extras refused.
CORE = """
import importlib
for name in (
    "mailbus.app.cli", "mailbus.consumer.runner", "mailbus.relay.relay",
    "mailbus.feedback.server", "mailbus.feedback.native.routes", "mailbus.app.status",
    "mailbus.app.overview", "mailbus.campaigns.commands", "mailbus.intake.replay",
):
    importlib.import_module(name)
from mailbus.app.cli import _build_parser
_build_parser()
from mailbus.providers.registry import named
assert sorted(named()) == ["mailgun", "postmark", "resend", "sendgrid", "ses", "smtp"]
from mailbus.providers.sendgrid.webhook import SendGrid
print("core ok")
"""


def _python(code: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "client")]))
    return subprocess.run(
        [sys.executable, "-c", _HOOK + code, *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_core_imports_without_any_extra() -> None:
    done = _python(CORE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "core ok"


@pytest.mark.parametrize(
    ("module", "extra", "missing"),
    [
        ("mailbus.providers.ses.sending", "ses", "boto3"),
        ("mailbus.providers.resend.events", "resend", "svix"),
        ("mailbus.intake.app", "intake", "faust"),
        ("mailbus.console.access", "console", "argon2"),
    ],
)
def test_an_adapter_without_its_extra_names_it(module: str, extra: str, missing: str) -> None:
    code = f"""
from mailbus.kernel.extras import MissingExtra
try:
    import {module}
except MissingExtra as exc:
    print(exc.extra, exc.module, exc, sep="|")
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split("|") == [
        extra,
        missing,
        f"mailbus[{extra}]: {missing} is not installed: pip install 'mailbus[{extra}]'",
    ]


def test_a_command_without_its_extra_exits_2_naming_it() -> None:
    code = "import sys; from mailbus.app.cli import main; sys.exit(main(sys.argv[1:]))"
    done = _python(code, "console", "hash-password", "ana", "operator", stdin="secret\n")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "mailbus: configuration error: mailbus[console]: argon2 is not installed:"
        " pip install 'mailbus[console]'"
    )
