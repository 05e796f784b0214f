"""The scratch databases that tests and benchmarks make for each run: an older release's
schema in one, and dropping it afterwards.

``DROP DATABASE ... WITH (FORCE)`` ends every other session first, but a role that is no
superuser (the local stack's app role) may not end an autovacuum worker's: a bulk load
just before often starts one, and the drop then fails with ``must be a member of the role
whose process is being terminated``. A plain ``DROP DATABASE`` stops autovacuum workers
by itself (and waits for them), so that is what follows; it fails only while a session
of ours is still open, which FORCE ends on the next try. It also fails when another
session's ``DROP ROLE`` deletes the same role setting at once, and then is tried again.
"""

from __future__ import annotations

import time

import psycopg

from mailbus.app.migrate import (
    MOVED_FROM_PUBLIC,
    available_migrations,
    pin_functions,
    statements,
)

__all__ = ["drop_database", "schema_as_of"]


def drop_database(admin_url: str, name: str, attempts: int = 10) -> None:
    """Drop database ``name`` (if it exists) through a connection to ``admin_url``."""
    quoted = name.replace('"', '""')
    with psycopg.connect(admin_url, autocommit=True) as admin:
        for attempt in range(attempts):
            try:
                try:
                    admin.execute(f'DROP DATABASE IF EXISTS "{quoted}" WITH (FORCE)')
                except psycopg.errors.InsufficientPrivilege:  # an autovacuum worker is in it
                    admin.execute(f'DROP DATABASE IF EXISTS "{quoted}"')
                return
            except psycopg.errors.ObjectInUse:  # a session of ours came meanwhile, or worse
                if attempt == attempts - 1:
                    raise
            except psycopg.errors.InternalError_ as exc:
                # "tuple concurrently deleted": a DROP ROLE elsewhere deleting its login's
                # setting in this database (grants.sql sets one for each login) at once
                if "concurrently" not in str(exc) or attempt == attempts - 1:
                    raise
            time.sleep(0.2)


def schema_as_of(url: str, last: int) -> None:
    """The schema as a release that shipped migrations up to ``last`` left it, recorded as
    that release's ``mailbus migrate`` recorded it: in ``public`` before 0072."""
    if last >= MOVED_FROM_PUBLIC:
        raise ValueError(f"releases after {MOVED_FROM_PUBLIC - 1} migrate into their schema")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = public")
        conn.execute(
            "CREATE TABLE mailbus_schema_migrations (version int PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in available_migrations():
            if migration.version <= last:
                for statement in statements(migration.sql) if migration.online else [migration.sql]:
                    conn.execute(statement.encode())
                pin_functions(conn)
                conn.execute(
                    "INSERT INTO mailbus_schema_migrations VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
