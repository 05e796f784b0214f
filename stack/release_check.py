"""`make release-check`: what a release is, built and tried as an adopter would.

    python stack/release_check.py [OUTDIR]    # default dist/release (git-ignored)

1. ``python -m build`` the sdist and wheel of both distributions (mailbus from the
   repository's root, mailbus-client from client/), versioned by setuptools-scm from the git
   tag (docs/releasing.md); ``twine check --strict`` their metadata; mailbus's sdist and
   wheel hold nothing of the sandbox (no ``sandbox*`` path: docs/installation.md#the-sandbox).
2. A fresh venv installs the two wheels (the runtime pinned by constraints.txt) and nothing
   of the checkout; from outside the checkout:
   - ``mailbus --version`` names the wheels' version, ``mailbus --help`` runs, and
     ``mailbus sandbox`` exits 2 (the sandbox is no part of a release);
   - ``mailbus migrate`` on a scratch database of MAILBUS_DATABASE_URL's server and topics
     of their own prefix on MAILBUS_KAFKA_BOOTSTRAP (both removed afterwards);
   - the slim client enqueues a mail there, and ``status --json`` counts it;
   - the release's ``relay`` and ``consume`` send it to the checkout's sandbox: accepted.
Exit 0, or 1 with the step that failed and its output.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parents[1]

ENQUEUE = """
import os, psycopg
from mailbus_client.enqueue import SendRequest, enqueue
with psycopg.connect(os.environ["MAILBUS_DATABASE_URL"]) as conn, conn.transaction():
    print(enqueue(conn, SendRequest("release-check-1", "ana@example.com", "welcome")).created)
"""


SEND_TIMEOUT_S = 90.0


class Failed(Exception):
    pass


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        command = " ".join(map(str, args))
        raise Failed(f"{command}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def build(out: Path) -> tuple[Path, Path]:
    shutil.rmtree(out, ignore_errors=True)
    for source in (REPO, REPO / "client"):
        run(sys.executable, "-m", "build", "--outdir", out, source)
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(out.glob("*")))
    [server] = out.glob("mailbus-*.whl")
    [client] = out.glob("mailbus_client-*.whl")
    [sdist] = out.glob("mailbus-*.tar.gz")
    with zipfile.ZipFile(server) as wheel, tarfile.open(sdist) as tar:
        for archive, names in ((server, wheel.namelist()), (sdist, tar.getnames())):
            sandbox = [n for n in names if any(p.startswith("sandbox") for p in Path(n).parts)]
            if sandbox:  # the sandbox and the providers' imitations of it: a checkout's
                raise Failed(f"{archive.name} ships the sandbox: {', '.join(sandbox)}")
    return server, client


def version_of(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def scratch_database() -> tuple[str, str]:
    """A new empty database on MAILBUS_DATABASE_URL's server: (its URL, its name)."""
    admin_url = os.environ["MAILBUS_DATABASE_URL"]
    name = f"release_check_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}")), name


def drop_database(name: str) -> None:
    with psycopg.connect(os.environ["MAILBUS_DATABASE_URL"], autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running(*commands: list[str | Path], env: dict[str, str], cwd: Path) -> Iterator[None]:
    """Long-running processes, stopped with SIGTERM (killed after 30 s) on the way out."""
    processes = [
        subprocess.Popen(
            [str(arg) for arg in command],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            assert process.stderr is not None
            process.stderr.close()


def drop_topics(prefix: str) -> None:
    admin = AdminClient({"bootstrap.servers": os.environ["MAILBUS_KAFKA_BOOTSTRAP"]})
    mine = [name for name in admin.list_topics(timeout=10).topics if name.startswith(prefix)]
    for future in admin.delete_topics(mine, operation_timeout=30).values() if mine else ():
        future.result()


def wait_accepted(url: str, key: str) -> None:
    deadline = time.monotonic() + SEND_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT status FROM mailbus.email_sends WHERE dedupe_key = %s", (key,)
            )
            status = (row.fetchone() or (None,))[0]
        if status == "accepted":
            return
        time.sleep(0.5)
    raise Failed(f"the mail was not sent within {SEND_TIMEOUT_S:.0f} s: still {status}")


def smoke(out: Path, server: Path, client: Path) -> None:
    venv = out / "venv"
    run(sys.executable, "-m", "venv", venv)
    python, mailbus = venv / "bin" / "python", venv / "bin" / "mailbus"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "-c", REPO / "constraints.txt", client, server)  # fmt: skip
    # the checkout out of reach: no PYTHONPATH, run from the venv's own directory
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.pop("MAILBUS_SCHEMA_REGISTRY_URL", None)
    shown = run(mailbus, "--version", env=env, cwd=venv).strip()
    if shown != f"mailbus {version_of(server)}":
        raise Failed(f"mailbus --version said {shown!r}, the wheel is {version_of(server)}")
    run(mailbus, "--help", env=env, cwd=venv)
    sandbox = subprocess.run(
        [mailbus, "sandbox"], env=env, cwd=venv, capture_output=True, text=True, check=False
    )
    if sandbox.returncode != 2 or "not part of a release" not in sandbox.stderr:
        raise Failed(f"mailbus sandbox in a release: exit {sandbox.returncode}, {sandbox.stderr}")
    url, name = scratch_database()
    env |= {
        "MAILBUS_DATABASE_URL": url,
        "MAILBUS_TOPIC_PREFIX": name.replace("_", "-"),
        "MAILBUS_PROVIDER_URL": f"http://127.0.0.1:{free_port()}",
        "MAILBUS_PROVIDER_API_KEY": "release-check",
        "MAILBUS_LOG_LEVEL": "WARNING",
    }
    env.pop("MAILBUS_METRICS_PORT", None)
    try:
        run(mailbus, "migrate", env=env, cwd=venv)
        if run(python, "-c", ENQUEUE, env=env, cwd=venv).strip() != "True":
            raise Failed("the slim client did not enqueue")
        status = json.loads(run(mailbus, "status", "--json", env=env, cwd=venv))
        if status["by_priority"] != {"p1": {"pending": 1}}:
            raise Failed(f"status --json did not count the enqueued row: {status['by_priority']}")
        port = env["MAILBUS_PROVIDER_URL"].rsplit(":", 1)[1]
        sandbox_from_checkout = [sys.executable, "-m", "mailbus", "sandbox", "--port", port]
        with (
            running(sandbox_from_checkout, env=dict(env), cwd=REPO),
            running(
                [mailbus, "relay"], [mailbus, "consume", "--priority", "p1"], env=env, cwd=venv
            ),
        ):
            sending = time.monotonic()
            wait_accepted(url, "release-check-1")
            print(f"release-check: sent in {time.monotonic() - sending:.1f} s")
    finally:
        drop_database(name)
        drop_topics(env["MAILBUS_TOPIC_PREFIX"])


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "dist" / "release"
    try:
        server, client = build(out)
        print(f"release-check: built {', '.join(p.name for p in sorted(out.glob('*')))}")
        smoke(out, server, client)
    except Failed as exc:
        print(f"release-check: {exc}", file=sys.stderr)
        return 1
    print(f"release-check: mailbus {version_of(server)} and its client install, run and send")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
