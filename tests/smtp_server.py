"""A real SMTP server for tests (aiosmtpd), answering by the recipient's local part.

``rcpt421-*``, ``rcpt452-*``, ``rcpt550-*``: that reply to RCPT TO (550 as ``5.1.1``);
``data451-*``: ``451 4.3.0`` to the first DATA of each Message-ID, accepted after;
``always451-*``: ``451 4.3.0`` to every DATA;
``drop-*``: the connection is dropped once the message arrived, before any reply;
``drop1-*``: so for the first DATA of each Message-ID only, accepted after;
anything else: ``250 2.0.0 Ok: queued as Q<n>``. ``messages`` counts what was accepted per
Message-ID, ``data_seen`` every message received (answered or not) per Message-ID.

The server's own state, switchable while it runs: ``greeting`` (e.g. ``421 4.7.0 too many
connections``) is answered to every new connection instead of 220, which is then closed;
with ``smtp_server(password=...)`` the server requires AUTH (``530`` to MAIL without it,
AUTH offered without TLS) and accepts ``password`` (``535`` to any other: rotate it to
refuse the client's). ``refused`` counts the greetings and AUTHs refused;
``drop_connections()`` closes every open session (a restart), so the client's kept
connections meet the new state too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

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
        self.contents: dict[str, bytes] = {}  # the last message under each Message-ID
        self.refused: Counter[str] = Counter()  # "greeting", "auth"
        self.greeting: str | None = None  # a refusing greeting, e.g. "421 4.7.0 ..."
        self.password: str | None = None  # the password AUTH accepts now
        self.sessions: set[SMTP] = set()
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once started
        self._lock = threading.Lock()
        self._queued = 0

    def drop_connections(self) -> None:
        def drop() -> None:
            for session in list(self.sessions):
                if session.transport is not None:
                    session.transport.close()

        assert self.loop is not None
        self.loop.call_soon_threadsafe(drop)

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.password.decode() == self.password
        if not ok:
            with self._lock:
                self.refused["auth"] += 1
        return AuthResult(success=ok, handled=False)  # aiosmtpd answers 235 or 535

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
            self.contents[message_id] = envelope.content
            seen = self.data_seen[message_id]
        if rcpt.startswith("drop-") or (rcpt.startswith("drop1-") and seen == 1):
            server.transport.abort()  # no reply: the client cannot know
            return "250 OK"
        if rcpt.startswith("always451-") or (rcpt.startswith("data451-") and seen == 1):
            return "451 4.3.0 Try again later"
        with self._lock:
            self.messages[message_id] += 1
            self._queued += 1
            queued = self._queued
        return f"250 2.0.0 Ok: queued as Q{queued:06d}"


class _Smtp(SMTP):
    """aiosmtpd's SMTP session, answering the recorder's refusing greeting if it has one."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.event_handler.sessions.add(self)

    def connection_lost(self, error: Exception | None) -> None:
        self.event_handler.sessions.discard(self)
        super().connection_lost(error)

    async def _handle_client(self) -> None:
        recorder: SmtpRecorder = self.event_handler
        reply = recorder.greeting
        if reply is None:
            await super()._handle_client()
            return
        with recorder._lock:
            recorder.refused["greeting"] += 1
        await self.push(reply)
        if self.transport is not None:
            self.transport.close()


class _Controller(Controller):
    def factory(self) -> SMTP:
        session = _Smtp(self.handler, **self.SMTP_kwargs)
        # AUTH required without TLS: set after construction, which would warn (an error
        # under pytest) about exactly what a local test server wants
        session._auth_required = self.handler.password is not None
        return session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def smtp_server(password: str | None = None) -> Iterator[tuple[str, SmtpRecorder]]:
    """``(smtp://127.0.0.1:PORT, recorder)`` while the server runs in its own thread; with
    ``password``, AUTH is required (and offered without TLS: a test server)."""
    recorder = SmtpRecorder()
    recorder.password = password
    port = free_port()
    auth: dict[str, Any] = {}
    if password is not None:
        auth = {"auth_require_tls": False, "authenticator": recorder.authenticate}
    controller = _Controller(recorder, hostname="127.0.0.1", port=port, **auth)
    controller.start()
    recorder.loop = controller.loop
    try:
        yield f"smtp://127.0.0.1:{port}", recorder
    finally:
        controller.stop()
