"""Connections that may pass through a transaction-pooling PgBouncer
(``MAILBUS_DATABASE_TRANSACTION_POOLING``, docs/guides/pgbouncer.md).

Under transaction pooling each transaction may run on another server connection, so
nothing a session keeps survives from one transaction to the next. psycopg prepares a
statement on the server once it ran ``prepare_threshold`` (5) times on a connection
(https://www.psycopg.org/psycopg3/docs/advanced/prepare.html); through such a pooler the
next execution meets a server session that never saw it ("prepared statement … does not
exist") or one where another client's statement of the same name already is ("… already
exists"). ``prepare_threshold=None`` turns preparing off. The processes that may run
behind such a pooler (``consume``, ``webhooks``, ``intake``) open every connection with
:func:`connect_options`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REPEATED_STATEMENT", "connect_options"]

# Why a one-shot command that runs a statement over and over on its connection (a batch, a
# dead letter, a tick at a time) refuses transaction pooling: psycopg prepares it there.
REPEATED_STATEMENT = "a statement it repeats, which psycopg prepares in the session"


def connect_options(transaction_pooling: bool) -> dict[str, Any]:
    """psycopg connection keywords for a URL that goes through a transaction-pooling
    PgBouncer when ``transaction_pooling`` is set: no prepared statements."""
    return {"prepare_threshold": None} if transaction_pooling else {}
