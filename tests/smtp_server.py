"""A real SMTP server for tests (aiosmtpd), answering by the recipient's local part.

``rcpt421-*``, ``rcpt452-*``, ``rcpt550-*``: that reply to RCPT TO (550 as ``5.1.1``);
``data451-*``: ``451 4.3.0`` to the first DATA of each Message-ID, accepted after;
``always451-*``: ``451 4.3.0`` to every DATA;
``drop-*``: the connection is dropped once the message arrived, before any reply;
anything else: ``250 2.0.0 Ok: queued as Q<n>``. ``messages`` counts what was accepted per
Message-ID, ``data_seen`` every message received (answered or not) per Message-ID.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes
from typing import Any

from aiosmtpd.controller import Controller

__all__ = ["SmtpRecorder", "smtp_server"]

_RCPT_REPLIES = {
    "rcpt421": "421 4.3.2 Service not available",
    "rcpt452": "452 4.5.3 Too many recipients",
    "rcpt550": "550 5.1.1 User unknown",
}


class SmtpRecorder:
    def __init__(self) -> None:
        self.messages: Counter[str] = Counter()
        self.data_seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._queued = 0

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        reply = _RCPT_REPLIES.get(address.split("-", 1)[0])
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message_id = str(message_from_bytes(envelope.content)["Message-ID"])
        rcpt = envelope.rcpt_tos[0]
        with self._lock:
            self.data_seen[message_id] += 1
            seen = self.data_seen[message_id]
        if rcpt.startswith("drop-"):
            server.transport.abort()  # no reply: the client cannot know
            return "250 OK"
        if rcpt.startswith("always451-") or (rcpt.startswith("data451-") and seen == 1):
            return "451 4.3.0 Try again later"
        with self._lock:
            self.messages[message_id] += 1
            self._queued += 1
            queued = self._queued
        return f"250 2.0.0 Ok: queued as Q{queued:06d}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def smtp_server() -> Iterator[tuple[str, SmtpRecorder]]:
    """``(smtp://127.0.0.1:PORT, recorder)`` while the server runs in its own thread."""
    recorder = SmtpRecorder()
    port = free_port()
    controller = Controller(recorder, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield f"smtp://127.0.0.1:{port}", recorder
    finally:
        controller.stop()
