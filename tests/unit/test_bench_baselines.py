"""bench/baselines/: today's benchmarks ported onto an old commit, applied by
bench/compare.py to that commit's worktree (issue 37: "keep 10bdcac measurable")."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import compare
import compare_doc

REPO = compare.REPO
PATCH = REPO / "bench" / "baselines" / "10bdcac.patch"
SHA = "10bdcaca18f6da08440123863361170bee3b8927"


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10bdcac's files in a git repository of their own (``git archive``: the repository
    itself is not touched)."""
    if subprocess.run(["git", "cat-file", "-e", f"{SHA}^{{commit}}"], cwd=REPO).returncode:
        pytest.skip("10bdcac is not in this clone (a shallow one?)")
    tree = tmp_path_factory.mktemp("10bdcac")
    archive = subprocess.run(["git", "archive", SHA], cwd=REPO, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    git("init", "--quiet", cwd=tree)
    return tree


def test_the_10bdcac_patch_applies_cleanly_and_touches_only_bench(old_tree: Path) -> None:
    git("apply", "--check", str(PATCH), cwd=old_tree)
    paths = [line.split("\t")[2] for line in git("apply", "--numstat", str(PATCH)).splitlines()]
    assert paths and all(path.startswith("bench/") for path in paths)


def test_the_ported_benchmarks_import_10bdcacs_layout(tmp_path: Path, old_tree: Path) -> None:
    """Applied, its scripts load 10bdcac's modules (not this checkout's) and name its
    queries: the imports were adapted, nothing of today's layout is left."""
    git("apply", str(PATCH), cwd=old_tree)
    try:
        probe = (
            "import sys; sys.path.insert(0, 'bench');"
            "import delivery_throughput as d, relay_throughput as r, harness as h;"
            "print(h.apply_migrations.__module__, d.HttpProvider.__module__,"
            " r.send_pointer_codec.__module__, sorted(set(d.query_names().values())))"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run(
            [sys.executable, "-c", probe], cwd=old_tree, env=env, check=True,
            capture_output=True, text=True,
        ).stdout  # fmt: skip
    finally:
        git("apply", "--reverse", str(PATCH), cwd=old_tree)
    assert out.startswith("mailbus.migrate consumer.provider schemas.codec ")
    assert "'claim_due'" in out and "'settle'" in out


def recorded(path: Path) -> list[str]:
    """The figure names a script records: the first argument of each ``record(...)``."""
    return [
        ast.unparse(node.args[0])
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "record"
    ]


@pytest.mark.parametrize("script", ["delivery_throughput.py", "relay_throughput.py"])
def test_the_port_records_the_figures_todays_script_records(old_tree: Path, script: str) -> None:
    """compare.py pairs the two sides by figure name: a figure renamed or added here and not
    in the port would read "not measured" for 10bdcac. Re-make the patch then (README)."""
    git("apply", str(PATCH), cwd=old_tree)
    try:
        ported = recorded(old_tree / "bench" / script)
    finally:
        git("apply", "--reverse", str(PATCH), cwd=old_tree)
    assert ported == recorded(REPO / "bench" / script)


def test_baseline_patch_matches_a_full_or_abbreviated_sha() -> None:
    names = ["README.md", "10bdcac.patch", "abc.patch", "notahexsha.patch"]
    assert compare_doc.baseline_patch(SHA, names) == "10bdcac.patch"
    assert compare_doc.baseline_patch(SHA, [f"{SHA}.patch"]) == f"{SHA}.patch"
    assert compare_doc.baseline_patch("abcdef0" + "0" * 33, names) is None


def test_baseline_patch_refuses_two_matches() -> None:
    with pytest.raises(ValueError, match="several patches"):
        compare_doc.baseline_patch(SHA, ["10bdcac.patch", "10bdcaca18.patch"])


def test_compare_picks_the_patch_from_this_checkouts_baselines() -> None:
    assert compare.bench_patch(SHA, None, None) == PATCH
    assert compare.bench_patch(SHA, "main", None) is None  # another commit's bench/: no patch
    assert compare.bench_patch(SHA, None, "none") is None
    assert compare.bench_patch("f" * 40, None, str(PATCH)) == PATCH


def test_prepare_bench_applies_the_patch_the_same_way_every_time(tmp_path: Path) -> None:
    """The worktree is reused: a second run (the patch already applied, a file it added
    there) gives the same bench/, and a run without the patch undoes it."""
    tree = tmp_path / "tree"
    (tree / "bench").mkdir(parents=True)
    (tree / "bench" / "script.py").write_text("old\n")
    git("init", "--quiet", cwd=tree)
    git("add", ".", cwd=tree)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "old", cwd=tree)
    sha = git("rev-parse", "HEAD", cwd=tree)
    (tree / "bench" / "script.py").write_text("today\n")
    (tree / "bench" / "added.py").write_text("new\n")
    git("add", "--intent-to-add", "bench/added.py", cwd=tree)
    patch = tmp_path / "port.patch"
    patch.write_text(git("diff", cwd=tree) + "\n")
    git("reset", "--quiet", cwd=tree)
    for _ in range(2):
        compare.prepare_bench(tree, sha, patch)
        assert (tree / "bench" / "script.py").read_text() == "today\n"
        assert (tree / "bench" / "added.py").read_text() == "new\n"
    compare.prepare_bench(tree, sha, None)
    assert (tree / "bench" / "script.py").read_text() == "old\n"
    assert not (tree / "bench" / "added.py").exists()
