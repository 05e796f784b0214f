"""The database goes away under a running consumer (its link cut by a proxy): the consumer
waits, stops cleanly when told to, and nothing is lost or doubled once the database is
back."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

from conftest import Stack
from relay_runner import wait_until
from tcp_proxy import TcpProxy


def through(proxy: TcpProxy, database_url: str) -> str:
    parts = urlsplit(database_url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def test_sigterm_while_the_database_is_down_exits_zero_and_loses_nothing(stack: Stack) -> None:
    parts = urlsplit(stack.settings.database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        stack.start_relay()
        stack.start_consumer(MAILBUS_DATABASE_URL=through(proxy, stack.settings.database_url))
        stack.seed(5, prefix="before")
        wait_until(lambda: stack.statuses()["accepted"] == 5, 60, "mail before the outage")
        proxy.cut()
        stack.seed(5, prefix="during")  # the relay still reaches the database
        time.sleep(3)  # the consumer now holds pointers it cannot load
        started = time.monotonic()
        assert stack.terminate("consumer", timeout=90) == 0
        print(f"consumer stopped {time.monotonic() - started:.1f}s after SIGTERM")
    finally:
        proxy.close()
    stack.start_consumer(name="after")
    assert stack.wait_settled(90) == {"accepted": 10}
    stack.assert_table_agrees_with_providers()
