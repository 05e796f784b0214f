"""Whether a database's schema lets a process of this build run on it (pure).

The one verdict of the start-up check (``mailbus migrate --status`` and every command,
mailbus/app/migrate.py) and of the guard on each new connection of a long-running process
(mailbus/kernel/schema_guard.py), so both refuse in the same words."""

from __future__ import annotations

__all__ = ["behind"]


def behind(database_version: int, build_version: int, missing: int) -> str | None:
    """Why a process of this build must not run on a database at ``database_version``
    that lacks ``missing`` of the build's migrations, or None when it lacks none."""
    if missing <= 0:
        return None
    return (
        f"database at {database_version}, this build needs {build_version}: run `mailbus migrate`"
    )
