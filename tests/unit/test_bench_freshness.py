"""bench/freshness.py: a stored benchmark result is marked stale once the code it measures
changed after the commit it was taken on (a real git repository in a temporary folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import freshness


def commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", path], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", f"change {path}"], cwd=repo, check=True)
    return freshness.head(repo)


def test_a_result_is_fresh_until_the_code_it_measures_changes(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    measured = commit(tmp_path, "relay/relay.py", "v1")
    entry = {"commit": measured}
    assert freshness.staleness(entry, ["relay"], tmp_path) is None
    commit(tmp_path, "notes/other.md", "unrelated")
    assert freshness.staleness(entry, ["relay"], tmp_path) is None
    commit(tmp_path, "relay/relay.py", "v2")
    stale = freshness.staleness(entry, ["relay"], tmp_path)
    assert stale is not None and measured[:9] in stale and "change relay/relay.py" in stale


def test_a_result_without_a_commit_or_from_another_history_is_stale(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    commit(tmp_path, "relay/relay.py", "v1")
    assert "unrecorded" in (freshness.staleness({}, ["relay"], tmp_path) or "")
    unknown = {"commit": "0" * 40}
    assert "not in this checkout's history" in (
        freshness.staleness(unknown, ["relay"], tmp_path) or ""
    )
