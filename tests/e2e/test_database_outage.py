"""The database goes away under a running consumer (its link cut by a proxy): the consumer
waits, stops cleanly when told to, and nothing is lost or doubled once the database is
back."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from e2e_stack import Stack
from relay_runner import wait_until
from tcp_proxy import TcpProxy


def through(proxy: TcpProxy, database_url: str) -> str:
    parts = urlsplit(database_url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def probe(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sigterm_while_the_database_is_down_exits_zero_and_loses_nothing(stack: Stack) -> None:
    parts = urlsplit(stack.settings.database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        port = free_port()
        stack.start_relay()
        stack.start_consumer(
            MAILBUS_DATABASE_URL=through(proxy, stack.settings.database_url),
            MAILBUS_METRICS_PORT=str(port),
        )
        stack.seed(5, prefix="before")
        wait_until(lambda: stack.statuses()["accepted"] == 5, 60, "mail before the outage")
        assert probe(port, "/healthz")[0] == 200
        wait_until(lambda: probe(port, "/readyz")[0] == 200, 30, "the consumer to be ready")
        proxy.cut()
        stack.seed(5, prefix="during")  # the relay still reaches the database
        wait_until(lambda: probe(port, "/readyz")[0] == 503, 30, "readiness to drop")
        status, document = probe(port, "/readyz")
        print(f"/readyz during the outage: {status} {document}")
        assert probe(port, "/healthz")[0] == 200  # alive: waiting, not broken
        started = time.monotonic()
        assert stack.terminate("consumer", timeout=90) == 0
        print(f"consumer stopped {time.monotonic() - started:.1f}s after SIGTERM")
    finally:
        proxy.close()
    stack.start_consumer(name="after")
    assert stack.wait_settled(90) == {"accepted": 10}
    stack.assert_table_agrees_with_providers()
