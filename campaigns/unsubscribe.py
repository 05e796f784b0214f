"""Unsubscribe tokens: one signed link per campaign recipient, pure.

A token is two URL-safe base64 segments (no padding), ``<payload>.<signature>``::

    payload   = "1:<campaign id>:<issued, unix seconds>:<address, lower-cased>"  (UTF-8)
    signature = HMAC-SHA256(K, payload)
    K         = HMAC-SHA256(MAILBUS_UNSUBSCRIBE_SECRET, "mailbus unsubscribe links")

The leading ``1`` is the format's version: a token of another version is refused. The
signature is compared in constant time before the payload is read, so a forged or
tampered token learns nothing but "invalid". Tokens do not expire by default (RFC 8058
links must keep working long after the mail was sent); :func:`verify_token` takes an
optional ``max_age_s``. Time and secret are passed in; nothing here does I/O.

The campaign fan-out computes the same tokens inside PostgreSQL, one statement per batch
(``campaigns/queries.sql``, ``fan_out``). PostgreSQL has ``sha256()`` but no HMAC without
an extension, so the fan-out is given the two padded keys of RFC 2104
(:func:`hmac_pads`) and computes ``sha256(outer || sha256(inner || payload))``, which is
HMAC-SHA256 by definition; tests check both sides agree. The pads travel as bind
parameters (visible wherever statement parameters are logged) and XOR back to their key,
so they are made from the derived key ``K``, never from the secret: what a log shows can
sign links, but never gives back the secret (a one-way HMAC of it), which may protect
more than links.

Rotation: :func:`verify_token` also takes the previous secret
(MAILBUS_UNSUBSCRIBE_SECRET_PREVIOUS), so links sent under it keep working; and for each
secret it also accepts the signature of links made before ``K`` existed (the secret's own
HMAC, version 1 as well), so that upgrading voids no link either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

from mailbus.kernel.errors import ConfigError

__all__ = [
    "VERSION",
    "Links",
    "Unsubscribe",
    "hmac_pads",
    "make_token",
    "signing_key",
    "unsubscribe_url",
    "verify_token",
]

VERSION = "1"
MAX_TOKEN_CHARS = 2048
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")
_BLOCK = 64  # SHA-256's block size in bytes
_PURPOSE = b"mailbus unsubscribe links"  # what the derived key K is for


@dataclass(frozen=True)
class Unsubscribe:
    """What a valid token says: who unsubscribes from which campaign, since when."""

    address: str
    campaign_id: int
    issued_at: int

    @property
    def source(self) -> str:
        return f"campaign:{self.campaign_id}"


@dataclass(frozen=True)
class Links:
    """Where unsubscribe links point and what signs them; both set, or links are off."""

    secret: str
    base_url: str

    def url(self, token: str) -> str:
        return unsubscribe_url(self.base_url, token)

    @classmethod
    def of(cls, secret: str, base_url: str | None) -> Links | None:
        """The links of these settings: None without a secret; a secret without a base
        URL is a configuration error (the links would lead nowhere)."""
        if not secret:
            return None
        if not base_url:
            raise ConfigError(
                "MAILBUS_UNSUBSCRIBE_BASE_URL", "must be set when MAILBUS_UNSUBSCRIBE_SECRET is"
            )
        return cls(secret, base_url)


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    if not _SEGMENT.fullmatch(text) or len(text) % 4 == 1:
        return None
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def signing_key(secret: str | bytes) -> bytes:
    """``K``, the key links are signed with: a one-way function of ``secret``."""
    return _sign(_key(secret), _PURPOSE)


def make_token(secret: str | bytes, address: str, campaign_id: int, issued_at: int) -> str:
    """The token of ``address`` (lower-cased here) for ``campaign_id``."""
    payload = f"{VERSION}:{int(campaign_id)}:{int(issued_at)}:{address.strip().lower()}".encode()
    return f"{_b64(payload)}.{_b64(_sign(signing_key(secret), payload))}"


def verify_token(
    token: str,
    secret: str | bytes,
    now: float,
    max_age_s: float | None = None,
    previous: str | bytes = "",
) -> Unsubscribe | None:
    """What ``token`` says if ``secret`` or ``previous`` signed it (and, with
    ``max_age_s``, it is not older than that at ``now``); None for anything else. Never
    raises."""
    if not secret or not token or len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        return None
    payload_text, signature_text = token.split(".")
    payload, signature = _unb64(payload_text), _unb64(signature_text)
    if payload is None or signature is None:
        return None
    keys = [
        key
        for each in (secret, previous)
        if each
        for key in (signing_key(each), _key(each))  # K, and the secret itself (older links)
    ]
    matched = False
    for key in keys:  # every key compared, in constant time each
        matched |= hmac.compare_digest(_sign(key, payload), signature)
    if not matched:
        return None
    try:
        version, campaign, issued, address = payload.decode("utf-8").split(":", 3)
    except (UnicodeDecodeError, ValueError):
        return None
    if version != VERSION or not campaign.isdigit() or not issued.isdigit() or "@" not in address:
        return None
    if max_age_s is not None and now - int(issued) > max_age_s:
        return None
    return Unsubscribe(address, int(campaign), int(issued))


def unsubscribe_url(base_url: str, token: str) -> str:
    """``<base>/unsubscribe/<token>`` (one slash between them)."""
    return f"{base_url.rstrip('/')}/unsubscribe/{token}"


def hmac_pads(secret: str | bytes) -> tuple[bytes, bytes]:
    """RFC 2104's (inner, outer) keys of :func:`signing_key` (32 bytes, so never hashed
    first): zero-filled to 64 bytes, XOR 0x36 and XOR 0x5c. They give back ``K``, never
    ``secret``."""
    key = signing_key(secret).ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)
