"""Probes that tell the truth (issue 35, review 2026-12-06 hole 16): the relay's ``/readyz``
fails within 30 s of its database being black-holed and recovers once it is back, and
fails when one of its lane threads died, or its P0 lane's process, until that is started
again."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from e2e_stack import Stack
from relay_runner import children, wait_until
from tcp_proxy import TcpProxy

pytestmark = pytest.mark.stack


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=15) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)
    except OSError:
        return 0, {}


def test_readyz_fails_within_30s_of_a_black_holed_database_and_recovers(stack: Stack) -> None:
    url = urlsplit(stack.settings.database_url)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 5432)
    through = urlunsplit(
        url._replace(netloc=f"{url.username}:{url.password}@127.0.0.1:{proxy.port}")
    )
    port = _free_port()
    try:
        stack.start_relay(MAILBUS_DATABASE_URL=through, MAILBUS_METRICS_PORT=str(port))
        wait_until(lambda: _readyz(port)[0] == 200, 60, "the relay ready")
        proxy.black_hole()
        holed = time.monotonic()
        wait_until(lambda: _readyz(port)[0] == 503, 30, "/readyz failing on a black hole")
        assert time.monotonic() - holed <= 30
        _, document = _readyz(port)
        assert not document["components"]["database round trip"]["ready"]
        proxy.restore()
        wait_until(lambda: _readyz(port)[0] == 200, 60, "/readyz ready again")
        [key] = stack.seed(1, prefix="after")  # and it works again: the row is published

        def published() -> bool:
            return stack.query(
                "SELECT published_at IS NOT NULL FROM email_sends WHERE dedupe_key = %s", key
            ) == [(True,)]

        wait_until(published, 60, "the relay publishing again")
    finally:
        proxy.close()
    assert stack.terminate("relay") == 0


def test_a_dead_relay_lane_makes_the_relay_unready(stack: Stack) -> None:
    port = _free_port()
    stack.start_relay(MAILBUS_METRICS_PORT=str(port))
    wait_until(lambda: _readyz(port)[0] == 200, 60, "the relay ready")
    # the outcome-event lane's next pass meets an error it does not retry (as a revoked
    # grant would be): its thread ends. The column only the lane reads goes, not the table,
    # which the statement-level event trigger of every INSERT into email_sends names.
    with psycopg.connect(stack.settings.database_url) as conn:
        conn.execute("ALTER TABLE email_send_events RENAME COLUMN published_at TO gone")
    stack.seed(1, prefix="wake")  # an outcome event on the way: the lane's pass
    wait_until(lambda: _readyz(port)[0] == 503, 30, "/readyz failing with a dead lane")
    _, document = _readyz(port)
    assert not document["components"]["relay.events"]["ready"]
    stack.kill("relay")


def test_a_killed_p0_lane_process_makes_the_relay_unready_until_it_is_restarted(
    stack: Stack,
) -> None:
    port = _free_port()
    relay = stack.start_relay(MAILBUS_METRICS_PORT=str(port))
    wait_until(lambda: _readyz(port)[0] == 200, 60, "the relay ready")
    [lane] = [pid for pid in children(relay.pid) if b"spawn_main" in _cmdline(pid)]
    os.kill(lane, signal.SIGKILL)
    wait_until(lambda: _readyz(port)[0] == 503, 30, "/readyz failing with the lane's process")
    _, document = _readyz(port)
    assert "exited with code -9" in document["components"]["relay.p0"]["detail"]
    wait_until(lambda: _readyz(port)[0] == 200, 60, "/readyz ready with a new process")
    [key] = stack.seed(1, prefix="after", priority="p0")

    def published() -> bool:
        return stack.query(
            "SELECT published_at IS NOT NULL FROM email_sends WHERE dedupe_key = %s", key
        ) == [(True,)]

    wait_until(published, 30, "the new process publishing")
    assert stack.terminate("relay") == 0


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read()
