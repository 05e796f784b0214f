"""The slim client in a fresh venv: what a domain service gets when it installs it.

``pip install ./client`` into ``python3 -m venv`` (PyPI for psycopg, without its binary
extra: plain psycopg on the system's libpq): no Kafka, aiohttp, Prometheus or faust comes
in, the only new top-level module is ``mailbus_client``, and from that venv alone a row is
enqueued into the real PostgreSQL. The full distribution installs one top-level module,
``mailbus``, and depends on the slim client rather than shipping a copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from services import REPO

pytestmark = pytest.mark.stack

# What psycopg brings along, and what every venv starts with.
PSYCOPG_OWN = {"psycopg", "psycopg-binary", "typing-extensions", "tzdata"}
VENV_OWN = {"pip", "setuptools"}
FORBIDDEN = {"confluent-kafka", "aiohttp", "prometheus-client", "faust-streaming", "httpx"}
# The rooms: top-level folders of the checkout, installed as mailbus.<room>; the sandbox
# stays in the checkout (docs/installation.md#the-sandbox).
SERVICE_PACKAGES = (
    "relay", "consumer", "schemas", "feedback", "intake", "campaigns", "providers",
)
# What only an extra brings (docs/installation.md#extras), never the core install.
EXTRAS = {
    "ses": {"boto3"},
    "sendgrid": set(),
    "resend": {"svix"},
    "intake": {"faust-streaming"},
    "console": {"argon2-cffi"},
}

# Prints {distribution: [its top-level modules]} as the venv's RECORD files say.
LIST_DISTRIBUTIONS = """
import json
from importlib import metadata
found = {}
for dist in metadata.distributions():
    tops = set()
    for file in dist.files or ():
        top = file.parts[0]
        if len(file.parts) == 1 and not top.endswith(".py") or ".dist-info" in top:
            continue  # a .pth or a file outside site-packages is no module
        if top.startswith("..") or top == "__pycache__":
            continue
        tops.add(top.removesuffix(".py"))
    name = dist.metadata["Name"].lower().replace("_", "-")
    found[name] = sorted(tops)
print(json.dumps(found))
"""

ENQUEUE = """
import json, os, sys
import psycopg
from mailbus_client.enqueue import SendRequest, enqueue
from mailbus_client.errors import InvalidSendError

with psycopg.connect(os.environ["MAILBUS_DATABASE_URL"]) as conn, conn.transaction():
    first = enqueue(conn, SendRequest("slim-1", "ana@example.com", "password_reset"))
    again = enqueue(conn, SendRequest("slim-1", "ana@example.com", "password_reset"))
try:
    with psycopg.connect(os.environ["MAILBUS_DATABASE_URL"]) as conn:
        enqueue(conn, SendRequest("slim-2", "not an address", "password_reset"))
    refused = None
except InvalidSendError as exc:
    refused = exc.field
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {
    "confluent_kafka", "aiohttp", "prometheus_client", "faust", "httpx", "mailbus"})
print(json.dumps({"first": [first.send_id, first.created], "again": again.created,
                  "refused": refused, "heavy": heavy}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak the checkout into the venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _run(*args: str | Path, env: dict[str, str] | None = None) -> str:
    """Run from / so that ``python -c`` cannot import the checkout (it puts the cwd first)."""
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd="/",
        env=env or _clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _fresh_venv(where: Path) -> Path:
    _run(sys.executable, "-m", "venv", where)
    return where / "bin" / "python"


def _copy(source: Path, target: Path) -> Path:
    """A copy to build from: pip builds in place and would leave build/ in the checkout."""
    ignore = shutil.ignore_patterns(
        ".git",
        ".stack",
        "__pycache__",
        "*.egg-info",
        "build",
        "dist",
        ".*_cache",
        "tests",
        "bench",
        ".hypothesis",
        ".venv",
    )
    shutil.copytree(source, target, ignore=ignore)
    return target


@pytest.fixture(scope="module")
def slim_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slim")
    python = _fresh_venv(root / "venv")
    _run(python, "-m", "pip", "install", "--quiet", _copy(REPO / "client", root / "client"))
    return python


def test_installs_psycopg_and_one_top_level_module(slim_venv: Path) -> None:
    installed: dict[str, list[str]] = json.loads(_run(slim_venv, "-c", LIST_DISTRIBUTIONS))
    assert installed["mailbus-client"] == ["mailbus_client"]
    assert "psycopg" in installed
    assert "psycopg-binary" not in installed  # the application picks its libpq (client/README.md)
    assert not FORBIDDEN & installed.keys()
    assert set(installed) - VENV_OWN - PSYCOPG_OWN == {"mailbus-client"}
    everything = {top for modules in installed.values() for top in modules}
    assert not everything & {"mailbus", *SERVICE_PACKAGES}
    others = VENV_OWN | PSYCOPG_OWN
    assert {top for name, tops in installed.items() if name not in others for top in tops} == {
        "mailbus_client"
    }


def test_enqueues_into_postgresql_from_the_venv(slim_venv: Path, database_url: str) -> None:
    out = json.loads(
        _run(slim_venv, "-c", ENQUEUE, env=_clean_env(MAILBUS_DATABASE_URL=database_url))
    )
    send_id, created = out["first"]
    assert created and out["again"] is False
    assert out["refused"] == "to_address"
    assert out["heavy"] == []  # nothing of the services' stack was imported
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, dedupe_key, status, expires_at - created_at FROM email_sends"
        ).fetchall()
    assert [row[:3] for row in rows] == [(send_id, "slim-1", "pending")]
    assert rows[0][3].total_seconds() == 900  # the packaged policy file: one-time codes


@pytest.fixture(scope="module")
def service_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full distribution built as a wheel from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    checkout = _copy(REPO, root / "mailbus")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", root, checkout)
    [wheel] = root.glob("mailbus-*.whl")
    return wheel


def test_the_wheel_installs_one_top_level_module(service_wheel: Path) -> None:
    names = zipfile.ZipFile(service_wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"mailbus"}
    packages = {
        str(Path(name).parent).replace("/", ".") for name in names if name.endswith("/__init__.py")
    }
    in_checkout = {
        "mailbus." + str(init.parent.relative_to(REPO)).replace("/", ".")
        for room in SERVICE_PACKAGES
        for init in (REPO / room).rglob("__init__.py")
        if "sandbox" not in init.parts  # providers/sandbox/, providers/<name>/sandbox/
    }
    assert in_checkout <= packages  # a package missing from pyproject's list fails here
    assert {"mailbus.kernel", "mailbus.app"} <= packages
    assert not any(name.startswith(("mailbus_client/", "client/")) for name in names)
    metadata = (
        zipfile.ZipFile(service_wheel)
        .read(next(name for name in names if name.endswith(".dist-info/METADATA")))
        .decode()
    )
    assert "Requires-Dist: mailbus-client" in metadata
    # the sandbox and every provider folder's imitation are a checkout's, never a release's
    assert [n for n in names if any(p.startswith("sandbox") for p in Path(n).parts)] == []


def _requirements(service_wheel: Path) -> list[Requirement]:
    archive = zipfile.ZipFile(service_wheel)
    text = archive.read(
        next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
    ).decode()
    return [
        Requirement(line.removeprefix("Requires-Dist: "))
        for line in text.splitlines()
        if line.startswith("Requires-Dist: ")
    ]


def test_the_core_install_leaves_the_extras_out(service_wheel: Path) -> None:
    requirements = _requirements(service_wheel)
    core = {canonicalize_name(r.name) for r in requirements if r.marker is None}
    assert "mailbus-client" in core and "cryptography" in core
    assert not core & set().union(*EXTRAS.values(), {"sendgrid"})  # SendGrid: cryptography
    for extra, needs in EXTRAS.items():
        brought = {
            canonicalize_name(r.name)
            for r in requirements
            if r.marker is not None and r.marker.evaluate({"extra": extra})
        }
        assert brought == needs, extra
    [everything] = [
        r for r in requirements if r.marker is not None and r.marker.evaluate({"extra": "all"})
    ]
    assert (everything.name, everything.extras) == ("mailbus", set(EXTRAS))  # mailbus[all]


def test_both_distributions_in_one_venv(
    service_wheel: Path, tmp_path: Path, database_url: str
) -> None:
    """The full distribution beside the slim client: each keeps its own files, and the
    slim client still enqueues."""
    python = _fresh_venv(tmp_path / "venv")
    _run(python, "-m", "pip", "install", "--quiet", _copy(REPO / "client", tmp_path / "client"))
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", service_wheel)
    installed: dict[str, list[str]] = json.loads(_run(python, "-c", LIST_DISTRIBUTIONS))
    assert installed["mailbus"] == ["mailbus"]
    assert installed["mailbus-client"] == ["mailbus_client"]
    out = json.loads(_run(python, "-c", ENQUEUE, env=_clean_env(MAILBUS_DATABASE_URL=database_url)))
    assert out["first"][1] and out["again"] is False and out["refused"] == "to_address"
    _run(python, "-c", "import mailbus.kernel.errors, mailbus_client.errors")
