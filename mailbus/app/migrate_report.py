"""What `mailbus migrate` says: ``--status``/``--dry-run`` (the plan) and an applied run,
each one document, printed as lines or, with ``--json``, as that document itself (its
shape: docs/reference/cli.md#json-documents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mailbus.app.migrate import SchemaState
from mailbus.app.migrate_waits import LockWait

__all__ = ["applied_lines", "plan_document", "plan_lines"]


def plan_document(
    state: SchemaState, wait: LockWait, *, dry_run: bool, roles: bool
) -> dict[str, Any]:
    """The database's recorded versions against this build's, and how each pending
    migration would be applied; nothing is changed to learn it."""
    return {
        "dry_run": dry_run,
        "database_version": state.database_version,
        "build_version": state.build_version,
        "applied": list(state.applied),
        "pending": [
            {
                "version": m.version,
                "name": m.label,
                "online": m.online,
                "locking": m.locking,  # refused without --allow-locking where sends are
                "plan": m.plan,
            }
            for m in state.pending
        ],
        "lock_timeout_s": wait.lock_timeout_s,
        "max_wait_s": wait.max_wait_s,
        "roles": roles,  # --roles: the grants would be set too
    }


def plan_lines(plan: dict[str, Any]) -> list[str]:
    pending = plan["pending"]
    named = [m["name"] + (" (locking)" if m["locking"] else "") for m in pending]
    applied = plan["applied"]
    lines = [
        f"schema: database at {plan['database_version']}, this build at {plan['build_version']}",
        f"applied: {_versions(applied) if applied else 'nothing'}",
        f"pending: {', '.join(named) if named else 'nothing (up to date)'}",
        *(f"  {m['name']}: {m['plan']}" for m in pending),
    ]
    if any(not m["online"] for m in pending):
        lines.append(
            f"locks: each try waits at most {plan['lock_timeout_s']:g} s per lock (writers"
            f" queued behind it wait no longer), tries again for up to"
            f" {plan['max_wait_s']:g} s"
        )
    if not plan["dry_run"]:
        return lines
    lines.append(f"would apply: {', '.join(named) if named else 'nothing'}")
    locking = [m["name"] for m in pending if m["locking"]]
    if locking:
        lines.append(
            f"would refuse without --allow-locking on a database that holds sends:"
            f" {', '.join(locking)}"
        )
    if plan["roles"]:
        lines.append("would set: the grants of schemas/sql/roles/grants.sql")
    lines.append("would ensure: the topics (nothing was applied: --dry-run)")
    return lines


def applied_lines(run: dict[str, Any]) -> list[str]:
    """An applied run's document (``applied``, ``roles``, ``topics_created``,
    ``schema_registry``; None: not done) as `migrate` prints it."""
    lines = [f"schema: applied {run['applied'] or 'nothing (up to date)'}"]
    if run["roles"] is not None:
        lines.append(f"roles: {', '.join(run['roles'])} (grants set)")
    if run["topics_created"] is not None:
        lines.append(f"topics: created {run['topics_created'] or 'nothing (all exist)'}")
    if run["schema_registry"] is not None:
        lines.append(f"schema registry: {', '.join(run['schema_registry'])}")
    return lines


def _versions(versions: Sequence[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5'."""
    runs: list[list[int]] = []
    for version in versions:
        if runs and version == runs[-1][-1] + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
