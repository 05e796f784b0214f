"""Our account at the sandbox provider: which API keys it accepts, and whether the sending
quota is spent -- both changeable at runtime, so a test can revoke or rotate a key, or run
the quota out, under load -- and each dialect's documented reply when they refuse a send.

``POST /_sandbox/account`` (a control endpoint) takes ``{"keys": [...]}`` (the keys accepted
from now on: ``[]`` revokes every key, ``["new"]`` rotates to a new one) and/or
``{"quota": {"retry_after": S}}`` (every send is refused for a spent quota; ``null`` ends
it); ``GET`` says how many keys are accepted and whether the quota is spent.
``POST /_sandbox/reset`` gives back the start-up key and a fresh quota.

The replies, per dialect (each provider's own documentation):

=========  ===============================================  ================================
dialect    a key it does not accept                         a spent quota
=========  ===============================================  ================================
mailbus    401 ``{"error": "unauthorized"}``                429 ``{"error": "quota_exceeded"}``
           (docs/reference/contract.md#email-api)           with ``Retry-After``
resend     403 ``invalid_api_key`` "API key is invalid"     429 ``daily_quota_exceeded`` with
           (https://resend.com/docs/api-reference/errors)   ``retry-after``
postmark   401, ErrorCode 10 "Bad or missing API token"     none documented: 422 ErrorCode
           (https://postmarkapp.com/developer/api/overview) 405 "Not allowed to send"
sendgrid   401 "The provided authorization grant is         401 "Maximum credits exceeded"
           invalid, expired, or revoked"
mailgun    401 ``Forbidden`` (text)                         none documented: 403 "Domain is
                                                            not allowed to send"
=========  ===============================================  ================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from aiohttp import web

__all__ = ["Account", "account_reply", "quota_reply", "read_account"]


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


def account_reply(dialect: str) -> web.Response:
    """The dialect's reply to a key it does not accept (see the module's table)."""
    if dialect == "resend":
        body = {"statusCode": 403, "name": "invalid_api_key", "message": "API key is invalid"}
        return _json(403, body)
    if dialect.startswith("postmark"):
        return _json(401, {"ErrorCode": 10, "Message": "Bad or missing API token"})
    if dialect == "sendgrid":
        return _sendgrid(401, "The provided authorization grant is invalid, expired, or revoked")
    if dialect == "mailgun":
        return web.Response(status=401, text="Forbidden")
    return _json(401, {"error": "unauthorized", "message": "missing or wrong API key"})


def quota_reply(dialect: str, retry_after: int) -> web.Response:
    """The dialect's reply while the sending quota is spent (see the module's table)."""
    seconds = str(retry_after)
    if dialect == "resend":
        message = "You have reached your daily email sending quota."
        body = {"statusCode": 429, "name": "daily_quota_exceeded", "message": message}
        return _json(429, body, {"retry-after": seconds})
    if dialect.startswith("postmark"):
        message = "Not allowed to send: your account has run out of credits."
        return _json(422, {"ErrorCode": 405, "Message": message})
    if dialect == "sendgrid":
        return _sendgrid(401, "Maximum credits exceeded")
    if dialect == "mailgun":
        return _json(403, {"message": "Domain is not allowed to send: sending limit exceeded"})
    body = {"error": "quota_exceeded", "message": "daily sending quota exceeded"}
    return _json(429, body, {"Retry-After": seconds})


def _sendgrid(status: int, message: str) -> web.Response:
    return _json(status, {"errors": [{"message": message, "field": None, "help": None}]})


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )
