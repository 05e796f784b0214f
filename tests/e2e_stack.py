"""One end-to-end test's mailbus (:class:`Stack`): its sandbox email API, database, topics
and the mailbus processes it starts for real. The ``stack`` fixture (tests/e2e/conftest.py)
builds one; tests import the class from here, never from ``conftest``, whose name other
directories' conftest files share."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from relay_runner import wait_until
from services import REPO, free_port, settings_env

from mailbus.kernel.provider_key import provider_key
from mailbus.kernel.settings import Settings
from mailbus.sandbox.server import ThreadedSandbox

API_KEY = "e2e-secret-key-0123456789"
OPEN_STATES = ("pending", "sending", "unknown")


class Stack:
    """One test's mailbus: its database, topics, sandbox and processes."""

    def __init__(self, settings: Settings, sandbox: ThreadedSandbox, logs: Path) -> None:
        self.settings = settings
        self.sandbox = sandbox
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        defaults = {
            "MAILBUS_PROVIDER_URL": self.sandbox.url,
            "MAILBUS_PROVIDER_API_KEY": API_KEY,
            "MAILBUS_REQUEST_TIMEOUT": "2",
            "MAILBUS_CONNECT_TIMEOUT": "1",
            "MAILBUS_BACKOFF_BASE": "0.2",
            "MAILBUS_BACKOFF_CAP": "2",
            "MAILBUS_RELAY_POLL_INTERVAL": "0.2",
        }
        return settings_env(self.settings, **{**defaults, **extra})

    def start(
        self, name: str, *args: str, build: Path = REPO, **env: str
    ) -> subprocess.Popen[bytes]:
        """``python -m mailbus ARGS`` of the checkout ``build`` (this one unless told)."""
        log = (self.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "mailbus", *args],
            cwd=build,
            env=self.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.processes[name] = process
        return process

    def start_relay(
        self, name: str = "relay", ready: bool = False, **env: str
    ) -> subprocess.Popen[bytes]:
        """``ready``: and wait for its /readyz, the P0 lane's own process up too (until then
        a P0 row waits a second for the pointer workers)."""
        if ready:
            env.setdefault("MAILBUS_METRICS_PORT", str(free_port()))
        process = self.start(name, "relay", **env)
        if ready:
            url = f"http://127.0.0.1:{env['MAILBUS_METRICS_PORT']}/readyz"
            wait_until(lambda: _answers_200(url), 60, f"{name} ready")
        return process

    def start_consumer(
        self, name: str = "consumer", priorities: str = "p0,p1,p2", **env: str
    ) -> subprocess.Popen[bytes]:
        return self.start(name, "consume", "--priority", priorities, **env)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(30)

    def terminate(self, name: str, timeout: float = 60) -> int:
        """SIGTERM, and its exit code; one that outlives ``timeout`` is killed, then raised."""
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
            raise

    def stop_all(self) -> None:
        """SIGTERM to all at once, so their drains overlap; any still running after 60 s
        (a lane is joined for up to 60 s) is killed, never left running unreaped."""
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        for name in list(self.processes):
            process = self.processes.pop(name)
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    def seed(
        self, count: int, prefix: str = "k", priority: str = "p1", **columns: Any
    ) -> list[str]:
        keys = [f"{prefix}-{n}" for n in range(count)]
        columns.setdefault("template", "welcome")
        extra_cols = "".join(f", {c}" for c in columns)
        extra_vals = "".join(f", %({c})s" for c in columns)
        with psycopg.connect(self.settings.database_url) as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO email_sends (dedupe_key, to_address, priority{extra_cols})"
                f" VALUES (%(key)s, %(to)s, %(priority)s{extra_vals})",
                [
                    {"key": k, "to": f"{k}@example.com", "priority": priority, **columns}
                    for k in keys
                ],
            )
        return keys

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.settings.database_url) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def statuses(self) -> Counter[str]:
        return Counter(
            {s: n for s, n in self.query("SELECT status, count(*) FROM email_sends GROUP BY 1")}
        )

    def settled(self) -> bool:
        snapshot = self.statuses()  # one read: rows move between states meanwhile
        return not any(snapshot[state] for state in OPEN_STATES)

    def wait_settled(self, timeout: float) -> Counter[str]:
        try:
            wait_until(self.settled, timeout, "every row settled")
        except AssertionError as exc:
            stuck = self.query(
                "SELECT status, attempts, next_try_at, last_error FROM email_sends"
                " WHERE status = ANY(%s) ORDER BY id LIMIT 5",
                list(OPEN_STATES),
            )
            raise AssertionError(
                f"{exc}: {dict(self.statuses())}; first open rows {stuck}"
            ) from None
        return self.statuses()

    def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return control(self.sandbox.url, path, body)

    def ledger(self) -> dict[str, Any]:
        return self.control("ledger")  # type: ignore[no-any-return]

    def set_faults(self, *faults: dict[str, Any], latency_ms: float = 0) -> None:
        self.control("faults", {"latency_ms": latency_ms, "faults": list(faults)})

    def accepted_twice(self) -> list[str]:
        return [k for k, v in self.ledger()["keys"].items() if v["accepted"] > 1]

    def assert_table_agrees_with_providers(
        self,
        fallback_url: str | None = None,
        key_prefix: str = "",
        fallback_held: Mapping[str, str] | None = None,
    ) -> None:
        """The invariant every e2e test ends with (docs/architecture.md#rules-every-path-keeps):
        a key is ``accepted`` exactly when a provider accepted it, with that provider's id,
        recorded as the provider that took it; no key is accepted twice or by two providers.
        The keys are the ones the provider sees (docs/providers.md#the-key-the-provider-sees);
        a provider also holds the keys of lives retention deleted, and only those.
        Only at rest: every row settled, or no consumer running (a call in flight is accepted
        at the provider before the table can say so). A fallback that is no sandbox (SES
        through moto) gives what it accepted as ``fallback_held``: key -> its message id."""
        providers = {None: self.sandbox.url}
        if fallback_url is not None:
            providers["fallback"] = fallback_url
        held: dict[str, tuple[str | None, str]] = {}  # key -> (provider, message id)
        for name, url in providers.items():
            for key, entry in control(url, "ledger")["keys"].items():
                if not entry["accepted"]:
                    continue
                assert entry["accepted"] == 1, f"{key} accepted {entry['accepted']}x by {name}"
                assert key not in held, f"{key} accepted by two providers"
                held[key] = (name, entry["id"])
        for key, message_id in (fallback_held or {}).items():
            assert key not in held, f"{key} accepted by two providers"
            held[key] = ("fallback", message_id)
        rows = self.query(
            # a fallback's rows record its kind (fallback:http, fallback:ses): the fallback
            "SELECT coalesce(provider_key, dedupe_key), status, message_id,"
            " split_part(provider, ':', 1) FROM email_sends"
        )
        table = {
            key: (provider, message_id)
            for key, status, message_id, provider in rows
            if status == "accepted"
        }
        retired = {
            provider_key(key_prefix, key, life)
            for key, lives in self.query("SELECT dedupe_key, lives FROM email_key_lives")
            for life in range(1, lives + 1)
        }
        assert not retired & table.keys(), "a deleted life's key is on a row"
        live = {  # this deployment's: under its prefix (another's may share the account)
            key: taken
            for key, taken in held.items()
            if key not in retired and key.startswith(key_prefix)
        }
        assert table == live, "the table disagrees with what the providers accepted"


def control(sandbox_url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """A sandbox control endpoint (``/_sandbox/PATH``): GET, or POST with a JSON body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{sandbox_url}/_sandbox/{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError as refused:  # 503: not ready yet
        refused.close()
        return False
    except OSError:  # not listening yet
        return False

