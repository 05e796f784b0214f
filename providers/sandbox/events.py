"""The sandbox's delivery events in a provider's own format, signed that provider's way:
what a provider posts to a webhook, pure; each provider folder's ``sandbox/`` has its
:class:`Signer` (``<Name>Signer``) and reads its secret from the environment or the
sandbox's options (``signer``), and mailbus's own events are :class:`MailbusSigner`'s.

A :class:`Signer` turns one of the sandbox's events (:mod:`mailbus.sandbox.outcomes`:
``{"id", "type", "message_id", "occurred_at", "bounce"?}``) and its recipient into the
request body and headers, at the time it is posted (``now``, unix seconds: every retry is
signed anew, as a provider's is). The event id is kept across retries and repeats in the
field each provider carries it in, so the receiver applies an event once. Each provider's
signing is written from its documents and independent of the libraries mailbus verifies
with (``svix``, ``sendgrid``), so that the sandbox cannot flatter the verifier.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.serialization import load_pem_private_key

from mailbus.feedback.signature import signature_header
from mailbus.kernel.errors import ConfigError

__all__ = [
    "JSON",
    "Event",
    "MailbusSigner",
    "Signed",
    "Signer",
    "body_of",
    "private_key",
    "secret_from_env",
    "unix_of",
]

JSON = {"Content-Type": "application/json"}

Event = dict[str, Any]


@dataclass(frozen=True)
class Signed:
    body: bytes
    headers: dict[str, str]


class Signer(Protocol):
    def sign(self, event: Event, to: str, now: int) -> Signed: ...


def body_of(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def unix_of(event: Event) -> float:
    return datetime.fromisoformat(event["occurred_at"]).timestamp()


@dataclass(frozen=True)
class MailbusSigner:
    """mailbus's own events (docs/reference/contract.md#delivery-events) to ``path``."""

    secret: str
    path: str

    def sign(self, event: Event, to: str, now: int) -> Signed:
        body = json.dumps(event).encode()
        header = signature_header(self.secret, self.path, body, now)
        return Signed(body, {"Mailbus-Signature": header, **JSON})


def secret_from_env(name: str) -> str:
    """``$name``, else the content of ``$name_FILE``, stripped; empty when neither."""
    value = os.environ.get(name, "").strip()
    if path := os.environ.get(f"{name}_FILE"):
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE", f"unreadable: {exc.strerror}") from None
    return value


def private_key(option: str, path: str) -> Any:
    """The unencrypted PEM private key at ``path`` (given as ``option``)."""
    try:
        return load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as exc:
        raise ConfigError(option, f"unreadable: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(option, f"not an unencrypted PEM private key: {exc}") from None
