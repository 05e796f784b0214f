"""A/B of two commits' benchmarks on one stack, run alternately, with ratios.

    python3 bench/compare.py A B [--bench relay,delivery] [--runs 3] [--bench-from B]
                             [--lock /tmp/bench.lock] [--args '...']

Each commit gets a git worktree under /tmp (``mailbus-compare-<sha>``) with its own virtual
environment (``python3 -m venv --system-site-packages``, then ``pip install -e ./client -e
'.[test]'`` inside it: the shared system install is never touched, and dependencies already
installed are reused). Each benchmark is then run A, B, A, B, … ``--runs`` times per side,
every run under an exclusive flock of ``--lock`` so no other benchmark overlaps it, each
with the commit's own scripts (``--bench-from C`` runs C's bench/ against both commits'
code, e.g. to measure a figure an older harness does not record). Figures come back through
bench/results.py; printed as min / median / max per side and the ratio B/A of the medians.
Needs the local stack. The machine is shared: only a ratio from one such run is a claim.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import compare_doc

REPO = Path(__file__).resolve().parent.parent


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def checkout(commit: str, bench_from: str | None) -> tuple[Path, Path]:
    """A worktree of ``commit`` with its own venv; (worktree, its python)."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    tree = Path(tempfile.gettempdir()) / f"mailbus-compare-{sha[:12]}"
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    # Always reset bench/: an earlier --bench-from may have replaced it in this worktree.
    bench = sha if bench_from is None else git("rev-parse", "--verify", bench_from)
    git("checkout", bench, "--", "bench", cwd=tree)
    python = tree / ".venv" / "bin" / "python"
    if not (tree / ".venv" / "installed").exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(tree / ".venv")],
            check=True,
        )
        client = ["-e", "./client"] if (tree / "client").is_dir() else []  # older commits: none
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *client, "-e", ".[test]"], cwd=tree, check=True)
        (tree / ".venv" / "installed").touch()  # a failed install is redone next time
    return tree, python


def run_once(tree: Path, python: Path, script: str, args: list[str], lock: str) -> list[dict]:
    """One invocation under the lock; the figures it recorded."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as out:
        path = out.name
    env = {**os.environ, "MAILBUS_BENCH_RESULTS": path}
    env.pop("PYTHONPATH", None)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            subprocess.run([str(python), f"bench/{script}", *args], cwd=tree, env=env, check=True)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    with open(path, encoding="utf-8") as source:
        entries = [json.loads(line) for line in source if line.strip()]
    os.unlink(path)
    return [e for e in entries if e["kind"] == "figure"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("a", help="baseline commit (e.g. main)")
    parser.add_argument("b", help="candidate commit")
    parser.add_argument("--bench", default="relay,delivery", help=", ".join(compare_doc.BENCHES))
    parser.add_argument("--runs", type=int, default=3, help="runs per side")
    parser.add_argument("--bench-from", help="run this commit's bench/ against both")
    parser.add_argument("--lock", default="/tmp/bench.lock")
    parser.add_argument("--args", help="arguments for the scripts instead of the defaults")
    parser.add_argument("--save", help="also write the raw figures (JSON) here")
    options = parser.parse_args()
    try:
        names = compare_doc.benches(options.bench)
    except ValueError as exc:
        parser.error(str(exc))
    sides = {
        "A": checkout(options.a, options.bench_from),
        "B": checkout(options.b, options.bench_from),
    }
    raw: dict[str, dict[str, list[dict]]] = {}
    for name in names:
        script, defaults = compare_doc.BENCHES[name]
        args = shlex.split(options.args) if options.args else list(defaults)
        figures: dict[str, list[dict]] = {"A": [], "B": []}
        for side, run in compare_doc.order(options.runs):
            started = time.monotonic()
            print(f"[{name}] {side} run {run + 1}/{options.runs} ...", flush=True)
            figures[side] += run_once(*sides[side], script, args, options.lock)
            print(
                f"[{name}] {side} run {run + 1} took {time.monotonic() - started:.0f}s", flush=True
            )
        raw[name] = figures
        command = f"python3 bench/{script} {shlex.join(args)}"
        print(f"\n### {name}: `{command}`, {options.runs} runs per side, alternating\n")
        print(
            compare_doc.table(compare_doc.pairs(figures["A"], figures["B"]), options.a, options.b),
            flush=True,
        )
    if options.save:
        Path(options.save).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
