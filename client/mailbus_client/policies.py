"""Degradation policies per kind of mail, and the bound on the queue: values and loaders.

A :class:`PolicyBook` maps a template name to its :class:`MailPolicy` by glob, first match
wins, the last entry matching ``*``. The shipped book is ``mailbus_client/mail_policies.json``;
``MAILBUS_POLICY_FILE`` names a file of the same shape that replaces it.

A :class:`QueueCap` says, for a priority and a count of open rows (``pending``,
``sending``, ``unknown``), whether one more may be enqueued: with ``MAILBUS_QUEUE_CAP=N``
and ``MAILBUS_QUEUE_CAP_SHARES=0.6,0.9,1.0`` (p2, p1, p0) p2 is refused from 60% of N
open rows, p1 from 90%, p0 from 100%, so the lowest priority is refused first.

Pure apart from :func:`load_policy_book` (reads a file) and the ``from_environ`` helpers
(read ``os.environ``). Every bad value raises :class:`ConfigError` naming the setting.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from mailbus_client.errors import ConfigError

__all__ = [
    "DEFAULT_CAP_SHARES",
    "WHEN_PROVIDER_DOWN",
    "MailPolicy",
    "PolicyBook",
    "QueueCap",
    "configured_policy_book",
    "load_policy_book",
    "parse_cap_shares",
    "parse_policy_book",
    "parse_queue_cap",
]

WHEN_PROVIDER_DOWN = ("wait", "pause", "fallback")
DEFAULT_CAP_SHARES = (0.6, 0.9, 1.0)  # p2, p1, p0
_CAP_PRIORITIES = ("p2", "p1", "p0")  # the order of MAILBUS_QUEUE_CAP_SHARES
_MAX_EXPIRY_S = 366 * 24 * 3600
_GLOB = re.compile(r"^[a-z0-9_.*?\[\]!-]{1,100}$")
_ENTRY_KEYS = {"name", "description", "match", "expire_after_s", "when_provider_down"}
_POLICY_FILE = "MAILBUS_POLICY_FILE"
_REMEMBERED_TEMPLATES = 4096  # templates whose policy a book keeps; more are matched each time


@dataclass(frozen=True)
class MailPolicy:
    """How one kind of mail degrades."""

    name: str
    match: tuple[str, ...]  # template name globs
    expire_after_s: float | None = None  # default expires_at = enqueue time + this; None: never
    when_provider_down: str = "wait"  # "wait" | "pause" | "fallback"

    def matches(self, template: str) -> bool:
        return any(fnmatchcase(template, glob) for glob in self.match)

    def default_expires_at(self, now: datetime) -> datetime | None:
        if self.expire_after_s is None:
            return None
        return now + timedelta(seconds=self.expire_after_s)


@dataclass(frozen=True)
class PolicyBook:
    """Policies in order; the first whose glob matches a template applies."""

    policies: tuple[MailPolicy, ...]
    # template -> its policy: the globs are matched once per template name, not per mail
    _found: dict[str, MailPolicy] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.policies or "*" not in self.policies[-1].match:
            raise ValueError("the last policy of a PolicyBook must match '*'")

    def for_template(self, template: str) -> MailPolicy:
        found = self._found.get(template)
        if found is None:
            found = next((p for p in self.policies if p.matches(template)), self.policies[-1])
            if len(self._found) < _REMEMBERED_TEMPLATES:
                self._found[template] = found
        return found


def parse_policy_book(data: object, setting: str = _POLICY_FILE) -> PolicyBook:
    """Check a decoded policy file; every problem raises ConfigError naming ``setting``."""
    if not isinstance(data, dict):
        raise ConfigError(setting, "expected a JSON object with a 'policies' list")
    unknown = sorted(set(data) - {"policies", "description"})
    if unknown:
        raise ConfigError(setting, f"unknown key {unknown[0]!r} (expected policies, description)")
    entries = data.get("policies")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(setting, "'policies' must be a non-empty list")
    policies: list[MailPolicy] = []
    for number, entry in enumerate(entries):
        policy = _parse_entry(entry, setting, number)
        if policies and "*" in policies[-1].match:
            raise ConfigError(
                setting, f"{_where(number, policy.name)}: unreachable after an entry matching '*'"
            )
        if any(p.name == policy.name for p in policies):
            raise ConfigError(setting, f"{_where(number, policy.name)}: duplicate name")
        policies.append(policy)
    if "*" not in policies[-1].match:
        raise ConfigError(
            setting,
            f"{_where(len(policies) - 1, policies[-1].name)}: the last entry must match '*'",
        )
    return PolicyBook(tuple(policies))


def load_policy_book(path: str | None) -> PolicyBook:
    """The book in ``path`` (a MAILBUS_POLICY_FILE), or the shipped defaults when None."""
    if path is None:
        text = resources.files("mailbus_client").joinpath("mail_policies.json").read_text()
        return parse_policy_book(json.loads(text), "mailbus_client/mail_policies.json")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(_POLICY_FILE, f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(_POLICY_FILE, f"{path} is not valid JSON: {exc}") from None
    try:
        return parse_policy_book(data)
    except ConfigError as exc:
        raise ConfigError(_POLICY_FILE, f"{path}: {exc.problem}") from None


def configured_policy_book(environ: Mapping[str, str] | None = None) -> PolicyBook:
    """The book MAILBUS_POLICY_FILE names, else the shipped one; each file is read once."""
    env = os.environ if environ is None else environ
    return _cached_book((env.get(_POLICY_FILE) or "").strip() or None)


@cache
def _cached_book(path: str | None) -> PolicyBook:
    return load_policy_book(path)


@dataclass(frozen=True)
class QueueCap:
    """A cap on open rows, refusing the lowest priority first; ``limit=None``: unbounded."""

    limit: int | None = None
    shares: tuple[float, float, float] = DEFAULT_CAP_SHARES  # p2, p1, p0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> QueueCap:
        env = os.environ if environ is None else environ
        return cls(
            parse_queue_cap(env.get("MAILBUS_QUEUE_CAP")),
            parse_cap_shares(env.get("MAILBUS_QUEUE_CAP_SHARES")),
        )

    def threshold(self, priority: str) -> int | None:
        """Open rows from which ``priority`` is refused; None when unbounded."""
        if self.limit is None:
            return None
        share = self.shares[_CAP_PRIORITIES.index(priority)]
        return max(1, math.ceil(share * self.limit - 1e-9))  # 0.6 * 100 is 60, not 61

    def admits(self, priority: str, open_rows: int) -> bool:
        threshold = self.threshold(priority)
        return threshold is None or open_rows < threshold


def parse_queue_cap(raw: str | None, setting: str = "MAILBUS_QUEUE_CAP") -> int | None:
    """A positive integer, or None (unbounded) when unset or empty."""
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(setting, f"expected a positive integer, got {raw.strip()!r}") from None
    if not 1 <= value <= 1_000_000_000:
        raise ConfigError(setting, f"must be between 1 and 1000000000, got {value}")
    return value


def parse_cap_shares(
    raw: str | None, setting: str = "MAILBUS_QUEUE_CAP_SHARES"
) -> tuple[float, float, float]:
    """Three shares of the cap for p2, p1, p0: each in (0, 1], ascending."""
    if raw is None or not raw.strip():
        return DEFAULT_CAP_SHARES
    parts = [part.strip() for part in raw.split(",")]
    try:
        p2, p1, p0 = (float(part) for part in parts)
    except ValueError:
        raise ConfigError(
            setting, f"expected three numbers for p2,p1,p0 such as 0.6,0.9,1.0, got {raw!r}"
        ) from None
    if not all(0 < share <= 1 for share in (p2, p1, p0)):
        raise ConfigError(setting, f"each share must be in (0, 1], got {raw!r}")
    if not p2 <= p1 <= p0:
        raise ConfigError(
            setting,
            f"shares are for p2,p1,p0 and must not decrease (p2 refused first), got {raw!r}",
        )
    return (p2, p1, p0)


def _parse_entry(entry: object, setting: str, number: int) -> MailPolicy:
    if not isinstance(entry, dict):
        raise ConfigError(setting, f"{_where(number, None)}: expected a JSON object")
    raw_name = entry.get("name")
    name = raw_name if isinstance(raw_name, str) and raw_name.strip() else None
    where = _where(number, name)
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(setting, f"{where}: unknown key {unknown[0]!r}")
    if name is None:
        raise ConfigError(setting, f"{where}: 'name' must be a non-empty string")
    missing = [key for key in ("match", "expire_after_s", "when_provider_down") if key not in entry]
    if missing:
        raise ConfigError(setting, f"{where}: missing {missing[0]!r}")
    if not isinstance(entry.get("description", ""), str):
        raise ConfigError(setting, f"{where}: 'description' must be a string")
    return MailPolicy(
        name=name,
        match=_globs(entry["match"], setting, where),
        expire_after_s=_expiry(entry["expire_after_s"], setting, where),
        when_provider_down=_when_down(entry["when_provider_down"], setting, where),
    )


def _globs(value: Any, setting: str, where: str) -> tuple[str, ...]:
    globs = [value] if isinstance(value, str) else value
    if not isinstance(globs, list) or not globs:
        raise ConfigError(setting, f"{where}: 'match' must be a glob or a non-empty list of globs")
    for glob in globs:
        if not isinstance(glob, str) or not _GLOB.match(glob):
            raise ConfigError(
                setting, f"{where}: 'match' has {glob!r}, not a template glob like 'order_*'"
            )
    return tuple(globs)


def _expiry(value: Any, setting: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(setting, f"{where}: 'expire_after_s' must be a number or null")
    if not 0 < value <= _MAX_EXPIRY_S:
        raise ConfigError(
            setting, f"{where}: 'expire_after_s' must be in (0, {_MAX_EXPIRY_S}], got {value}"
        )
    return float(value)


def _when_down(value: Any, setting: str, where: str) -> str:
    if value not in WHEN_PROVIDER_DOWN:
        raise ConfigError(
            setting,
            f"{where}: 'when_provider_down' must be one of {', '.join(WHEN_PROVIDER_DOWN)},"
            f" got {value!r}",
        )
    return str(value)


def _where(number: int, name: str | None) -> str:
    return f"policies[{number}]" + (f" ({name!r})" if name else "")
