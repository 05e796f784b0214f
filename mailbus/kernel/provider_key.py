"""The key the provider sees (docs/reference/contract.md#email-api): one pure function, used
by every adapter where a mail's key reaches its provider (an Idempotency-Key header, a
metadata field, a custom argument, a tag) and by whatever matches a provider's event back
to a row.

A row's *life* counts the rows its dedupe key had: 1 for the first, N for the row enqueued
again after retention deleted the N-1 before it (docs/retention.md#a-key-enqueued-again).
``MAILBUS_PROVIDER_KEY_PREFIX`` goes first, so two deployments on one provider account
never share a key::

    provider_key("", "order-7", 1)      == "order-7"
    provider_key("", "order-7", 2)      == "order-7~2"
    provider_key("stg:", "order-7", 3)  == "stg:order-7~3"

One dedupe key ending in ``~`` and digits (``"a~2"``) would give, in its first life, the
key of another dedupe key's later life (``"a"``, life 2): such a key carries ``~1`` in its
first life (``"a~2~1"``), so no two (dedupe key, life) pairs share a provider key and
:func:`parse_provider_key` reads every key back to the one pair.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_PREFIX_CHARS",
    "parse_provider_key",
    "prefix_problem",
    "provider_key",
    "row_provider_key",
]

MAX_PREFIX_CHARS = 32
_PREFIX = re.compile(r"[A-Za-z0-9._:-]+")
_LIFE_SUFFIX = re.compile(r"~([0-9]+)\Z")


def provider_key(prefix: str, dedupe_key: str, life: int) -> str:
    """``{prefix}{dedupe_key}`` in a key's first life, ``{prefix}{dedupe_key}~{life}`` in
    each later one (and ``~1`` for a first life whose key already ends in ``~<digits>``)."""
    if life < 1:
        raise ValueError(f"a key's life counts from 1, got {life}")
    if life == 1 and _LIFE_SUFFIX.search(dedupe_key) is None:
        return f"{prefix}{dedupe_key}"
    return f"{prefix}{dedupe_key}~{life}"


def row_provider_key(
    prefix: str, dedupe_key: str, life: int, sent_key: str | None, attempts: int
) -> str:
    """The key a row goes (or went) to its provider under: the one its first claim recorded
    (``email_sends.provider_key``); else, for a row claimed before that column existed (or
    by an older build during a rollout), its bare dedupe key, which is what went out; else
    :func:`provider_key` of its life under today's prefix."""
    if sent_key is not None:
        return sent_key
    if attempts > 0:
        return dedupe_key
    return provider_key(prefix, dedupe_key, life)


def parse_provider_key(prefix: str, key: str) -> tuple[str, int] | None:
    """``(dedupe_key, life)`` that :func:`provider_key` turns into ``key`` under ``prefix``,
    or None when no pair does (another deployment's key, or not one of ours)."""
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    found = _LIFE_SUFFIX.search(rest)
    if found is None:
        return (rest, 1) if rest else None
    dedupe_key, digits = rest[: found.start()], found.group(1)
    life = int(digits)
    if not dedupe_key or str(life) != digits or life < 1:
        return None
    if life == 1 and _LIFE_SUFFIX.search(dedupe_key) is None:
        return None  # "a~1": provider_key("a", 1) is "a", so this is no key of ours
    return dedupe_key, life


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be ``MAILBUS_PROVIDER_KEY_PREFIX``, or None: empty (no prefix),
    or up to 32 ASCII letters, digits, ``.``, ``_``, ``:`` and ``-``, which every
    provider's key field carries as they are."""
    if prefix and (len(prefix) > MAX_PREFIX_CHARS or _PREFIX.fullmatch(prefix) is None):
        return (
            f"expected up to {MAX_PREFIX_CHARS} ASCII letters, digits, '.', '_', ':' or '-'"
            f" (e.g. 'staging:'), got {prefix!r}"
        )
    return None
