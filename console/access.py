"""Who may use the console and what they may do: users, roles, sessions, CSRF tokens.

Users come from a file (``MAILBUS_CONSOLE_USERS_FILE``), one ``name:role:hash`` a line,
the hash an Argon2id one (argon2-cffi, `mailbus console hash-password`); blank lines and
``#`` comments are skipped. With ``MAILBUS_CONSOLE_PROXY_HEADER`` set, a trusted reverse
proxy names the user in that header instead; the user's role is the file's, else viewer.

Two roles: ``viewer`` reads every page; ``operator`` may also act (replay, campaign moves,
suppressions). A session is a random token in an HttpOnly, SameSite=Strict cookie, kept in
this process (a restart signs everyone out); each session has its own CSRF token, which
every POST must carry in its ``csrf`` field (compared in constant time).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.extras import extra

with extra("console"):
    from argon2 import PasswordHasher
    from argon2.exceptions import InvalidHashError, VerificationError

__all__ = [
    "ROLES",
    "Session",
    "Sessions",
    "User",
    "Users",
    "hash_password",
    "load_users",
    "parse_users",
]

ROLES = ("viewer", "operator")
SESSION_TTL_S = 12 * 3600
_hasher = PasswordHasher()
# Verified against when the name is unknown, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = _hasher.hash(secrets.token_hex(16))


@dataclass(frozen=True)
class User:
    name: str
    role: str
    password_hash: str = ""  # "" or "-": signs in only through the proxy header

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


class Users:
    """The users of the file, by name."""

    def __init__(self, users: list[User]) -> None:
        self._by_name = {user.name: user for user in users}

    def check_password(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs; None otherwise (same work either way)."""
        user = self._by_name.get(name)
        hashed = user.password_hash if user and user.password_hash not in ("", "-") else None
        try:
            _hasher.verify(hashed or _DUMMY_HASH, password)
        except (VerificationError, InvalidHashError):
            return None
        return user if hashed else None

    def from_proxy(self, name: str) -> User:
        """The user a trusted proxy named: the file's role, else a viewer."""
        return self._by_name.get(name) or User(name, "viewer")


def parse_users(text: str, where: str = "MAILBUS_CONSOLE_USERS_FILE") -> Users:
    """``name:role:hash`` lines (pure); a bad line raises ConfigError naming its number."""
    users: list[User] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, rest = line.partition(":")
        role, sep2, hashed = rest.partition(":")
        if not (sep and sep2) or not name.strip():
            raise ConfigError(where, f"line {number}: expected name:role:hash")
        if role not in ROLES:
            raise ConfigError(where, f"line {number}: role must be viewer or operator")
        if hashed not in ("", "-") and not hashed.startswith("$argon2"):
            raise ConfigError(where, f"line {number}: the hash is not an Argon2 hash")
        users.append(User(name.strip(), role, hashed))
    return Users(users)


def load_users(path: str | None) -> Users:
    if path is None:
        return Users([])
    try:
        return parse_users(Path(path).read_text())
    except OSError as exc:
        raise ConfigError("MAILBUS_CONSOLE_USERS_FILE", f"cannot read: {exc.strerror}") from None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


@dataclass
class Session:
    user: User
    csrf: str
    expires: float

    def csrf_ok(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


@dataclass
class Sessions:
    """Signed-in users by cookie token; ``clock`` gives seconds (injected for tests)."""

    clock: Callable[[], float] = time.monotonic
    ttl_s: float = SESSION_TTL_S
    _open: dict[str, Session] = field(default_factory=dict)

    def open(self, user: User) -> str:
        now = self.clock()
        for old in [key for key, session in self._open.items() if session.expires < now]:
            del self._open[old]  # swept at each sign-in: expired sessions do not pile up
        token = secrets.token_urlsafe(32)
        self._open[token] = Session(user, secrets.token_urlsafe(32), now + self.ttl_s)
        return token

    def get(self, token: str | None) -> Session | None:
        session = self._open.get(token or "")
        if session is None or session.expires < self.clock():
            self._open.pop(token or "", None)
            return None
        return session

    def close(self, token: str | None) -> None:
        self._open.pop(token or "", None)

    def for_proxy(self, user: User) -> Session:
        """A proxy-authenticated user's session, kept by name (the header comes each time)."""
        key = f"proxy:{user.name}:{user.role}"
        session = self.get(key)
        if session is None:
            session = Session(user, secrets.token_urlsafe(32), self.clock() + self.ttl_s)
            self._open[key] = session
        return session
