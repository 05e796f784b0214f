"""Amazon SES for tests: moto's server mode (a kept AWS emulator) in a process of its own,
reached through the real AWS SDK; what it accepted is read from its ``/moto-api/data.json``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from smtp_server import free_port

__all__ = ["REGION", "MotoSes", "moto_ses"]

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

    def sent(self) -> list[dict[str, Any]]:
        """Every message moto's SES accepted: ``{"id", "source", "destinations", ...}``."""
        with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=10) as reply:
            data = json.load(reply)
        return list(data.get("ses", {}).get("Message", []))


@contextmanager
def moto_ses() -> Iterator[MotoSes]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
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
