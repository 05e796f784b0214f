"""The ``Mailbus-Signature`` header of delivery events: signing and verifying, pure.

    Mailbus-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256 of "<t>.<path>.<raw body>">

``path`` is the request's path as the receiver routes it (``/webhooks/sandbox``), so a
captured request replayed to another path (``/webhooks/other``) does not verify. The
digest is compared in constant time before anything else is looked at; only a request
whose signature holds has its timestamp checked against the tolerance (300 s either way),
so a forged request learns nothing but "401". Several ``v2`` entries are allowed (a
sender rotating secrets signs with both); one match is enough.

``v1`` (the digest of ``"<t>.<raw body>"``, the form docs/reference/contract.md#delivery-events
names) is still accepted from a sender that signs nothing else, since the public contract
promises it; it does not cover the path. A header that carries any ``v2`` entry is held to
``v2``: a ``v1`` beside it cannot rescue a mismatch. :func:`signature_header` writes both,
so receivers of either form verify it. Other schemes are ignored. Time is passed in;
:func:`verify` returns a :class:`Verdict`, never raises.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = [
    "HEADER",
    "LEGACY_SCHEME",
    "SCHEME",
    "TOLERANCE_S",
    "Verdict",
    "sign",
    "sign_legacy",
    "signature_header",
    "timely",
    "verify",
]

HEADER = "Mailbus-Signature"
SCHEME = "v2"
TOLERANCE_S = 300
LEGACY_SCHEME = "v1"
_MAX_HEADER = 2048
_HEX_DIGITS = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Verdict:
    """``ok``, or why not: ``missing``, ``malformed``, ``mismatch`` or ``stale``."""

    ok: bool
    reason: str = ""


def sign(secret: str | bytes, path: str, body: bytes, timestamp: int) -> str:
    """The hex digest of ``"<timestamp>.<path>.<body>"`` under ``secret`` (v2)."""
    return _digest(secret, f"{timestamp}.{path}.".encode() + body)


def sign_legacy(secret: str | bytes, body: bytes, timestamp: int) -> str:
    """The hex digest of ``"<timestamp>.<body>"`` under ``secret`` (v1, without the path)."""
    return _digest(secret, f"{timestamp}.".encode() + body)


def signature_header(secret: str | bytes, path: str, body: bytes, timestamp: int) -> str:
    """The full header value a sender puts on ``body`` posted to ``path`` at ``timestamp``:
    ``v1`` for receivers of the contract's form, ``v2`` (covering the path) for the rest."""
    v1 = sign_legacy(secret, body, timestamp)
    return f"t={timestamp},{LEGACY_SCHEME}={v1},{SCHEME}={sign(secret, path, body, timestamp)}"


def _digest(secret: str | bytes, message: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def verify(
    header: str | None,
    path: str,
    body: bytes,
    secret: str | bytes,
    now: float,
    tolerance_s: float = TOLERANCE_S,
) -> Verdict:
    """Check ``header`` for ``body`` received at ``path`` at time ``now`` (unix seconds)."""
    if not header:
        return Verdict(False, "missing")
    parsed = _parse(header)
    if parsed is None:
        return Verdict(False, "malformed")
    timestamp, v2_digests, v1_digests = parsed
    if v2_digests:
        digests, expected = v2_digests, sign(secret, path, body, timestamp).encode()
    else:
        digests, expected = v1_digests, sign_legacy(secret, body, timestamp).encode()
    matched = False
    for digest in digests:  # every entry compared, in constant time each
        matched |= hmac.compare_digest(expected, digest.encode())
    if not matched:
        return Verdict(False, "mismatch")
    if abs(now - timestamp) > tolerance_s:
        return Verdict(False, "stale")
    return Verdict(True)


def _parse(header: str) -> tuple[int, list[str], list[str]] | None:
    """``(t, [v2 digests], [v1 digests])``, or None when the header is not of the
    documented form."""
    if len(header) > _MAX_HEADER:
        return None
    timestamp: int | None = None
    digests: list[str] = []
    legacy: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return None
        if key == "t":
            if timestamp is not None or not value.isascii() or not value.isdigit():
                return None
            if len(value) > 12:  # beyond year 33658: not a timestamp
                return None
            timestamp = int(value)
        elif key in (SCHEME, LEGACY_SCHEME):
            digest = value.lower()
            if len(digest) != 64 or not set(digest) <= _HEX_DIGITS:
                return None
            (digests if key == SCHEME else legacy).append(digest)
        # Other schemes (v0, a future v3) are ignored, as Stripe's receivers do.
    if timestamp is None or not (digests or legacy):
        return None
    return timestamp, digests, legacy


def timely(stamp: str, now: float, tolerance_s: float) -> Verdict:
    """For a request whose signature already holds: ``ok`` when its unix-seconds ``stamp``
    is within ``tolerance_s`` of ``now``, else ``stale`` (``malformed``: not a number)."""
    try:
        moment = float(stamp)
    except ValueError:
        return Verdict(False, "malformed")
    if abs(now - moment) > tolerance_s:
        return Verdict(False, "stale")
    return Verdict(True)
