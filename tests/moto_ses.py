"""Amazon SES for tests: moto's server mode (a kept AWS emulator) in a process of its own,
reached through the real AWS SDK; what it accepted is read from its ``/moto-api/data.json``."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from smtp_server import free_port

__all__ = ["REGION", "MotoSes", "ReplySwallower", "moto_ses"]

REGION = "eu-west-1"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class MotoSes:
    def __init__(self, url: str) -> None:
        self.url = url

    def client(self) -> Any:
        return boto3.client("sesv2", region_name=REGION, endpoint_url=self.url, **CREDENTIALS)

    def verify(self, sender: str) -> None:
        """Verify the sender identity through the SDK, as an AWS account owner would."""
        self.client().create_email_identity(EmailIdentity=sender)

    def sent(self, kind: str = "Message") -> list[dict[str, Any]]:
        """Every message moto's SES accepted: ``{"id", "source", "destinations", ...}``
        (``kind`` ``TemplateMessage``: those sent by a template, with ``template`` and
        ``template_data``)."""
        with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=10) as reply:
            data = json.load(reply)
        return list(data.get("ses", {}).get(kind, []))


@contextmanager
def moto_ses(templates: bool = False) -> Iterator[MotoSes]:
    """moto's server; ``templates``: with SES v2 templated sends (tests/moto_ses_templates.py)."""
    port = free_port()
    server = (
        [str(Path(__file__).with_name("moto_ses_templates.py"))]
        if templates
        else ["-m", "moto.server"]
    )
    process = subprocess.Popen(
        [sys.executable, *server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield MotoSes(url)
    finally:
        process.terminate()
        process.wait(10)


class ReplySwallower:
    """A TCP proxy in front of ``port`` whose first ``count`` connections carry the request
    to the server and never bring its reply back: a timeout after acceptance."""

    def __init__(self, port: int, count: int) -> None:
        self._target = ("127.0.0.1", port)
        self._left = count
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            swallow, self._left = self._left > 0, self._left - 1
            server = socket.create_connection(self._target)
            self._sockets += (client, server)
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
            sink = None if swallow else client
            threading.Thread(target=self._pipe, args=(server, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket | None) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if sink is not None:
                    sink.sendall(chunk)
        with contextlib.suppress(OSError):
            if sink is not None:
                sink.shutdown(socket.SHUT_WR)
