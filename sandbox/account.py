"""Our account at the sandbox provider: which API keys it accepts, and whether the sending
quota is spent -- both changeable at runtime, so a test can revoke or rotate a key, or run
the quota out, under load.

``POST /_sandbox/account`` (a control endpoint) takes ``{"keys": [...]}`` (the keys accepted
from now on: ``[]`` revokes every key, ``["new"]`` rotates to a new one) and/or
``{"quota": {"retry_after": S}}`` (every send is refused for a spent quota; ``null`` ends
it); ``GET`` says how many keys are accepted and whether the quota is spent.
``POST /_sandbox/reset`` gives back the start-up key and a fresh quota.

Each dialect's documented reply when they refuse a send is its own
(:meth:`mailbus.providers.sandbox.dialect.Dialect.refused_key`, ``quota_spent``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Account", "read_account"]


@dataclass
class Account:
    """The keys the provider accepts; ``quota_retry_after`` set while the quota is spent."""

    keys: frozenset[str]
    quota_retry_after: int | None = None
    _initial: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def starting_with(cls, api_key: str) -> Account:
        keys = frozenset({api_key})
        return cls(keys, None, keys)

    def reset(self) -> None:
        self.keys = self._initial
        self.quota_retry_after = None

    def to_dict(self) -> dict[str, object]:
        return {"keys": len(self.keys), "quota_retry_after": self.quota_retry_after}


def read_account(account: Account, document: object) -> None:
    """Apply a ``POST /_sandbox/account`` body; ValueError naming what is wrong."""
    if not isinstance(document, dict) or not set(document) <= {"keys", "quota"}:
        raise ValueError('expected {"keys": [...]} and/or {"quota": {"retry_after": S} | null}')
    if "keys" in document:
        keys = document["keys"]
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise ValueError("keys must be a list of non-empty strings")
        account.keys = frozenset(keys)
    if "quota" in document:
        quota = document["quota"]
        if quota is None:
            account.quota_retry_after = None
            return
        retry_after = quota.get("retry_after", 3600) if isinstance(quota, dict) else None
        if not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0:
            raise ValueError("quota.retry_after must be a whole number of seconds >= 0")
        account.quota_retry_after = retry_after
