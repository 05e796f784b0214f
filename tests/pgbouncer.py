"""A real PgBouncer in front of the local PostgreSQL, for one test database
(docs/guides/pgbouncer.md): Debian's ``pgbouncer`` (``make install`` installs it), on a free
loopback port, its ini and auth file in the test's tmp directory. Missing, the test fails:
it is never skipped. Its ``[pgbouncer]`` lines are the guide's (its ``ini`` block), so the
configuration the guide gives is the one tested; a test may override one.

The pool is small (``default_pool_size`` 3) so that the clients' transactions rotate over
a few server connections, as they do in production, and a statement that lives in one
server session (a prepared statement) is soon missed by the next transaction.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import pytest

__all__ = ["PgBouncer", "running_pgbouncer"]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "pgbouncer.md"


@dataclass(frozen=True)
class PgBouncer:
    url: str  # the test database's URL, through PgBouncer
    log: Path  # what PgBouncer logged

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


def guide_settings() -> dict[str, str]:
    """The ``key = value`` lines of the guide's ``pgbouncer.ini`` block."""
    block = re.search(r"^```ini\n(.*?)^```", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    assert block is not None, f"{GUIDE} shows no ini block"
    lines = (line.partition("=") for line in block.group(1).splitlines())
    return {key.strip(): value.strip() for key, sep, value in lines if sep}


@contextmanager
def running_pgbouncer(database_url: str, workdir: Path, **override: str) -> Iterator[PgBouncer]:
    """PgBouncer serving the database of ``database_url`` (with its user and password)
    until the block ends; ``override``: settings in place of the guide's."""
    if not Path(PGBOUNCER).exists():
        pytest.fail("pgbouncer is not installed: `make install` installs Debian's package")
    server = urlsplit(database_url)
    dbname = server.path.lstrip("/")
    user, password = unquote(server.username or ""), unquote(server.password or "")
    port = _free_port()
    auth_file = workdir / "pgbouncer-users.txt"
    auth_file.write_text(f'"{user}" "{password}"\n')
    settings = {
        **guide_settings(),
        **override,
        "listen_addr": "127.0.0.1",
        "listen_port": str(port),
        "unix_socket_dir": "",
        "auth_type": "scram-sha-256",
        "auth_file": str(auth_file),
        "default_pool_size": "3",
        "max_client_conn": "200",
    }
    if os.geteuid() == 0:  # it refuses to run as root; it reads its files before it drops
        settings["user"] = "nobody"
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{dbname} = host={server.hostname} port={server.port or 5432} dbname={dbname}\n"
        "[pgbouncer]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items())
    )
    log = workdir / "pgbouncer.log"
    with log.open("wb") as out:
        process = subprocess.Popen([PGBOUNCER, str(ini)], stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, process, log)
        netloc = f"{server.netloc.rpartition('@')[0]}@127.0.0.1:{port}"
        yield PgBouncer(urlunsplit(server._replace(netloc=netloc)), log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pgbouncer exited {process.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"pgbouncer did not listen within 10 s: {log.read_text()}")
