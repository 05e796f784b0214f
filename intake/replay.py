"""`mailbus dlq replay` of an intake dead letter: the stored event mapped again.

An intake dead letter (reason ``intake_undecodable`` or ``intake_invalid``) has no send
row: it keeps the event's own bytes (``email_dead_letters.original_value``). Once its
cause is gone (a mapping fixed or added, a schema registered, a validation relaxed), the
replay reads those bytes through the intake's own :class:`~mailbus.intake.events.EventReader`
and inserts the row with the intake's own statement (``insert_rows``: expiry and
``MAILBUS_INTAKE_MAX_AGE`` count from the event's ``occurred_at``, a key that exists is
left alone), or refuses it again with the reason. It runs inside the replay's transaction
(:mod:`mailbus.consumer.dead_letter_admin`), which claims the letter first, so a letter
is replayed once even when two replays run at once.

:func:`remap` is pure (bytes in, a decision out); :class:`EventReplayer` is the
PostgreSQL adapter the composition root hands to the replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from mailbus.kernel.settings import Settings
from mailbus.schemas.registry import RegistryWriters, registry_client
from mailbus_client.policies import configured_policy_book
from mailbus_client.sqlfiles import load_queries

from .config import IntakeConfig
from .events import EventReader, NewRow, Rejected
from .mappings import load_mappings
from .rows import rows_document

__all__ = ["EventReplayer", "Refused", "remap"]


@dataclass(frozen=True)
class Refused:
    """The stored event is still no row, and why (the dead letter stays not replayed)."""

    reason: str


def remap(reader: EventReader, value: bytes | None) -> NewRow | Refused:
    """What the intake makes of ``value`` today: a row, or the reason it refuses it."""
    decision = reader.read(value)
    if isinstance(decision, NewRow):
        return decision
    if isinstance(decision, Rejected):
        return Refused(f"still intake_{decision.reason}: {decision.error}")
    return Refused(f"cannot be decoded yet: {decision.error}")


class EventReplayer:
    """Maps a stored event again and inserts its row; the send id, or why not (text)."""

    def __init__(self, reader: EventReader, max_age_s: float) -> None:
        self._reader = reader
        self._max_age_s = max_age_s
        queries = load_queries("mailbus.intake", "queries.sql")
        self._insert = queries["insert_rows"]
        self._existing = queries["send_id_by_key"]

    @classmethod
    def from_settings(cls, settings: Settings, config: IntakeConfig) -> EventReplayer:
        """With the mappings, policies and registry the intake itself would use."""
        registry = None
        if settings.schema_registry_url is not None:
            registry = RegistryWriters(registry_client(settings.schema_registry_url))
        reader = EventReader(
            load_mappings(config.mappings_path), configured_policy_book(), registry
        )
        return cls(reader, config.max_age_s)

    def __call__(self, conn: psycopg.Connection[Any], value: bytes | None) -> int | str:
        """Insert the row of ``value`` in ``conn``'s transaction; the row's id (that of
        the key's existing row when the key was enqueued meanwhile), or why not."""
        found = remap(self._reader, value)
        if isinstance(found, Refused):
            return found.reason
        params = {"rows": rows_document([found]), "max_age_s": self._max_age_s}
        inserted = conn.execute(self._insert, params).fetchone()
        if inserted is not None:
            return int(inserted[1])
        existing = conn.execute(self._existing, {"dedupe_key": found.dedupe_key}).fetchone()
        if existing is None:  # unreachable: ON CONFLICT found the key
            return f"key {found.dedupe_key} neither inserted nor found"
        return int(existing[0])
