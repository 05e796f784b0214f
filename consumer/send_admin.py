"""`mailbus send show / resolve / cancel KEY`: one mail's story, and the operator's hand on a
mail stuck in ``unknown`` or one that must not go out.

Each change is one transaction of two statements: a guarded update of the send (its
status in the WHERE clause, :file:`send_admin.sql`) and, only when it matched, the audit
row in ``email_send_resolutions`` (who, when, what). A send that moved meanwhile (claimed
by a consumer, settled by a look-up) matches nothing and is left as it is:

- ``resolve --accepted MESSAGE_ID``: ``unknown → accepted`` with the provider's id;
- ``resolve --not-sent``: ``unknown → pending`` under the same key, due now, its doubt
  settled and the row marked ``at_least_once``, so the consumer sends it again whatever
  the provider offers (a key's window or "waits for an operator" no longer holds it), and
  through the primary configured now, whatever kind of primary took its earlier calls;
- ``cancel``: ``pending → expired`` for a send no call was made for (``attempts = 0``):
  the client's ``cancel_send`` (``mailbus_client/queries.sql``), the same function
  ``Client.cancel`` calls, which writes the audit row itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from mailbus.consumer.dead_letter_admin import operator_name
from mailbus.consumer.dead_letter_views import jsonable
from mailbus.kernel.errors import RefusedError, StorageError
from mailbus.kernel.json_output import print_document
from mailbus.kernel.provider_key import row_provider_key
from mailbus.kernel.settings import Settings
from mailbus_client.db_schema import DEFAULT_SCHEMA
from mailbus_client.sqlfiles import load_queries
from mailbus_client.steps import client_queries

__all__ = ["SendNotFound", "SendStory", "change", "print_show", "run_change", "story"]

_CHANGES = {
    "accepted": ("resolve_accepted", "unknown"),
    "not_sent": ("resolve_not_sent", "unknown"),
    "cancelled": ("cancel_send", "pending with no attempt made"),
}


class SendNotFound(RefusedError):
    """No send has this dedupe key."""


@dataclass(frozen=True)
class SendStory:
    send: dict[str, Any]
    attempts: list[dict[str, Any]]
    delivery_events: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    resolutions: list[dict[str, Any]]


def _queries() -> dict[str, str]:
    return load_queries("mailbus.consumer", "send_admin.sql")


def story(database_url: str, key: str, key_prefix: str = "", *, payload: bool = True) -> SendStory:
    """The send with dedupe key ``key`` and everything recorded about it; its
    ``provider_key`` is the key the provider sees (or will see: the first claim records it,
    under the consumer's ``MAILBUS_PROVIDER_KEY_PREFIX``), beside its ``key_life``. Without
    ``payload``, the send has its variables' names (``variables``) instead of their values
    (the console, whose role may not read payloads)."""
    q = _queries()
    try:
        with psycopg.connect(database_url, row_factory=dict_row) as conn:
            query = q["send_by_key" if payload else "send_shown_by_key"]
            send = conn.execute(query, {"key": key}).fetchone()
            if send is None:
                lives = conn.execute(q["key_lives"], {"key": key}).fetchone()
                before = f" (retention deleted its {lives['lives']} earlier)" if lives else ""
                raise SendNotFound(f"no send has the key {key!r}{before}")
            send["provider_key"] = row_provider_key(
                key_prefix, key, send["key_life"], send["provider_key"], send["attempts"]
            )
            ids = {"send_id": send["id"], "message_id": send["message_id"]}
            return SendStory(
                send=send,
                attempts=conn.execute(q["attempts"], ids).fetchall(),
                delivery_events=conn.execute(q["delivery_events"], ids).fetchall()
                if send["message_id"]
                else [],
                dead_letters=conn.execute(q["dead_letters"], ids).fetchall(),
                resolutions=conn.execute(q["resolutions"], ids).fetchall(),
            )
    except psycopg.Error as exc:
        raise StorageError(f"send {key!r} not read: {exc}") from exc


def change(
    database_url: str,
    key: str,
    action: str,
    by: str,
    message_id: str | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> bool:
    """Apply ``action`` (accepted, not_sent, cancelled) to the send ``key`` if its status
    allows it, with the audit row; False (nothing changed) when it does not. ``schema``:
    where the client's cancel finds its function (MAILBUS_DB_SCHEMA)."""
    q = _queries()
    query, _ = _CHANGES[action]
    try:
        with psycopg.connect(database_url) as conn:
            if action == "cancelled":
                cancel = client_queries(schema)[query]
                cancelled = conn.execute(cancel, {"key": key, "by": by}).fetchone()
                return cancelled is not None and cancelled[0] is not None
            row = conn.execute(q[query], {"key": key, "message_id": message_id}).fetchone()
            if row is None:
                conn.rollback()
                return False
            send_id, from_status = row
            conn.execute(
                q["record_resolution"],
                {
                    "send_id": send_id,
                    "action": action,
                    "from_status": from_status,
                    "message_id": message_id,
                    "by": by,
                },
            )
            return True
    except psycopg.Error as exc:
        raise StorageError(f"send {key!r} not changed: {exc}") from exc


def print_show(settings: Settings, key: str, *, as_json: bool) -> int:
    told = story(settings.database_url, key, settings.provider_key_prefix)
    document = {
        "send": told.send,
        "attempts": told.attempts,
        "delivery_events": told.delivery_events,
        "dead_letters": told.dead_letters,
        "resolutions": told.resolutions,
    }
    if as_json:
        print(json.dumps(jsonable(document), indent=2, sort_keys=True))
        return 0
    for name, value in told.send.items():
        if name != "payload_json":
            print(f"{name}: {jsonable(value)}")
    for section in ("attempts", "delivery_events", "dead_letters", "resolutions"):
        rows = document[section]
        assert isinstance(rows, list)
        print(f"{section}: {len(rows) or 'none'}")
        for row in rows:
            print("  " + ", ".join(f"{k}={jsonable(v)}" for k, v in row.items()))
    return 0


def run_change(
    settings: Settings,
    key: str,
    action: str,
    message_id: str | None = None,
    as_json: bool = False,
) -> int:
    """The command: 0 when changed; RefusedError (exit 3, one line saying why) when the
    send's status does not allow it or no send has the key."""
    if change(
        settings.database_url, key, action, operator_name(), message_id, settings.db_schema
    ):
        if as_json:
            document = {"key": key, "action": action, "message_id": message_id}
            print_document(document)
        else:
            print(f"{key}: {action.replace('_', ' ')} (recorded in email_send_resolutions)")
        return 0
    send = story(settings.database_url, key).send  # SendNotFound when there is none
    _, needs = _CHANGES[action]
    raise RefusedError(
        f"{key} is {send['status']} (attempts {send['attempts']}): {action.replace('_', ' ')}"
        f" needs a send that is {needs}; nothing changed"
    )
