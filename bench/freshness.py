"""Whether a stored benchmark result still describes the code: the commit it was measured
on against the last commit that changed the code it measures (git, in the checkout)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["head", "staleness"]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def head(repo: Path) -> str:
    """The checkout's commit, recorded with each result."""
    return _git(repo, "rev-parse", "HEAD").stdout.strip()


def staleness(entry: Mapping[str, Any], measures: Sequence[str], repo: Path) -> str | None:
    """A warning when the code a benchmark measures changed after its figures were taken,
    or when they name no commit; None when they describe the checkout's code."""
    commit = entry.get("commit")
    if not commit:
        return "measured on an unrecorded commit: re-run it before quoting these figures."
    if _git(repo, "merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        return f"measured on {commit[:9]}, not in this checkout's history: re-run it."
    log = _git(repo, "log", "-1", "--format=%h %s", f"{commit}..HEAD", "--", *measures)
    changed = log.stdout.strip()
    if not changed:
        return None
    return (
        f"measured on {commit[:9]}, older than the last change to the code it measures"
        f" ({', '.join(measures)}): `{changed[:90]}`. Re-run it before quoting these figures."
    )
