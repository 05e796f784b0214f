"""What the sandbox saw and accepted: per-key counts, concurrency, a bounded request log.

Mutable, and not thread-safe: the server touches it only from its event loop, and every
check-then-act (``accept``) runs without awaiting, so it is atomic there.

Per Idempotency-Key (:class:`KeyRecord`): ``requests`` (sends that arrived under the key,
whatever became of them), ``accepted`` (new message ids minted: 0 or 1 for this honest
sandbox; a second request with the same key replays the id), ``sends`` (times a request
under the key was treated as accepted, replays included) and the ``id``.

Every provider request (send or lookup) is logged as a :class:`RequestRecord` at arrival,
with outcome ``"pending"`` until it is settled; ``in_flight``/``max_concurrent`` count the
handlers running at once.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mailbus.sandbox.faults import FAULT_KINDS

__all__ = ["OUTCOMES", "KeyRecord", "Ledger", "RequestRecord", "new_message_id"]

OUTCOMES = (
    "pending",  # still being handled
    "accepted",  # 200 with a newly minted id
    "replayed",  # 200 with the id already accepted under the key
    "unauthorized",  # 401
    "bad_request",  # 400
    *(kind for kind in FAULT_KINDS if kind != "slow"),  # an injected fault answered
    "found",  # lookup: 200
    "not_found",  # lookup: 404
)


def new_message_id() -> str:
    """A fresh provider message id, ``msg_<uuid4 hex>``."""
    return f"msg_{uuid.uuid4().hex}"


@dataclass(slots=True)
class KeyRecord:
    """Counts for one Idempotency-Key."""

    requests: int = 0
    accepted: int = 0
    sends: int = 0
    id: str | None = None
    to: str | None = None
    template: str | None = None
    # a mail sent by the provider's own template: its name and data (the mail's variables)
    provider_template: str | None = None
    template_data: dict[str, Any] | None = None
    accepted_at: float = 0.0  # monotonic, when ``id`` was minted (a key's window)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "requests": self.requests,
            "accepted": self.accepted,
            "sends": self.sends,
            "id": self.id,
            "to": self.to,
            "template": self.template,
        }
        if self.provider_template is not None:  # only then: an entry keeps its shape
            entry.update(provider_template=self.provider_template, template_data=self.template_data)
        return entry


@dataclass(slots=True)
class RequestRecord:
    """One request: arrival times (monotonic and wall), key, kind, and outcome."""

    monotonic: float
    wall: float
    key: str | None
    kind: str  # "send" or "lookup"
    outcome: str = "pending"
    to: str | None = None  # a send's recipient, once its body was read

    def to_dict(self) -> dict[str, Any]:
        return {
            "t": self.wall,
            "monotonic": self.monotonic,
            "key": self.key,
            "kind": self.kind,
            "outcome": self.outcome,
            "to": self.to,
        }


class Ledger:
    """Per-key counts, outcome totals, concurrency and the last ``max_records`` requests."""

    def __init__(
        self,
        max_records: int = 200_000,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        mint: Callable[[], str] = new_message_id,
    ) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._mint = mint
        self.keys: dict[str, KeyRecord] = {}
        self.records: deque[RequestRecord] = deque(maxlen=max_records)
        self.outcomes: Counter[str] = Counter()
        self.in_flight = 0
        self.max_concurrent = 0
        self.sends = 0
        self.lookups = 0
        self.accepted = 0

    def arrive(self, key: str | None, kind: str = "send") -> RequestRecord:
        """Log a request that has arrived; it is in flight until :meth:`depart`."""
        self.in_flight += 1
        if self.in_flight > self.max_concurrent:
            self.max_concurrent = self.in_flight
        record = RequestRecord(self._monotonic(), self._wall(), key, kind)
        self.records.append(record)
        if kind == "send":
            self.sends += 1
            if key is not None:
                entry = self.keys.get(key)
                if entry is None:
                    entry = self.keys[key] = KeyRecord()
                entry.requests += 1
        else:
            self.lookups += 1
        return record

    def settle(self, record: RequestRecord, outcome: str) -> None:
        """Give a request its outcome (once)."""
        record.outcome = outcome
        self.outcomes[outcome] += 1

    def depart(self) -> None:
        """A request's handler has finished (answered, dropped or given up)."""
        self.in_flight -= 1

    def accept(
        self,
        key: str | None,
        *,
        to: str,
        template: str,
        window_s: float | None = None,
        replay: bool = True,
        provider_template: str | None = None,
        template_data: dict[str, Any] | None = None,
    ) -> tuple[str, bool]:
        """Accept a send under ``key``: ``(id, True)`` if minted now, ``(id, False)`` on replay.
        A key first accepted ``window_s`` or more ago is expired, as a provider forgets
        it: a new id is minted and ``accepted`` counts the second mail. No key: always a
        new mail, under a key of its own (its id). ``replay`` False: ``key`` only names the
        mail (a provider without idempotency keys), so every send is a new mail under it.
        ``provider_template`` and ``template_data``: a mail sent by the provider's own
        template, recorded so tests can assert what was sent."""
        if key is None:
            message_id = self._mint()
            key = f"no-key-{message_id}"
        entry = self.keys.get(key)
        if entry is None:
            entry = self.keys[key] = KeyRecord()
        entry.sends += 1
        now = self._monotonic()
        expired = window_s is not None and now - entry.accepted_at >= window_s
        if entry.id is not None and not expired and replay:
            return entry.id, False
        entry.id = self._mint()
        entry.accepted_at = now
        entry.accepted += 1
        entry.to, entry.template = to, template
        entry.provider_template, entry.template_data = provider_template, template_data
        self.accepted += 1
        return entry.id, True

    def lookup(self, key: str) -> str | None:
        """The id accepted under ``key``, if any."""
        entry = self.keys.get(key)
        return entry.id if entry is not None else None

    def search(self, text: str, lag_s: float = 0.0) -> list[tuple[str, str]]:
        """``(key, id)`` of the mails a loose search for ``text`` finds, the newest first:
        keys starting with it, ignoring case, accepted at least ``lag_s`` ago."""
        wanted = text.lower()
        visible_before = self._monotonic() - lag_s
        found = [
            (entry.accepted_at, key, entry.id)
            for key, entry in self.keys.items()
            if entry.id is not None
            and key.lower().startswith(wanted)
            and entry.accepted_at <= visible_before
        ]
        return [(key, message_id) for _, key, message_id in sorted(found, reverse=True)]

    def reset(self) -> None:
        """Forget everything except what is in flight right now."""
        self.keys.clear()
        self.records.clear()
        self.outcomes.clear()
        self.max_concurrent = self.in_flight
        self.sends = self.lookups = self.accepted = 0

    def totals(self) -> dict[str, Any]:
        """Aggregate counts: sends, lookups, ids accepted, and requests per outcome."""
        return {
            "sends": self.sends,
            "lookups": self.lookups,
            "accepted": self.accepted,
            "keys": len(self.keys),
            "outcomes": dict(self.outcomes),
        }

    def snapshot(self) -> dict[str, Any]:
        """The ``GET /_sandbox/ledger`` document."""
        return {
            "keys": {key: entry.to_dict() for key, entry in self.keys.items()},
            "totals": self.totals(),
            "max_concurrent": self.max_concurrent,
            "in_flight": self.in_flight,
        }

    def request_log(self, since: float | None = None) -> list[dict[str, Any]]:
        """The ``GET /_sandbox/requests`` document, oldest first; ``since`` is wall time."""
        return [r.to_dict() for r in self.records if since is None or r.wall >= since]
