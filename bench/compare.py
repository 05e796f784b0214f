"""A/B of two commits' benchmarks on one stack, run alternately, with ratios.

    python3 bench/compare.py A B [--bench relay,delivery] [--runs 3] [--bench-from B]
                             [--lock /tmp/bench.lock] [--args '...'] [--baseline-patch FILE]

Each commit gets a git worktree under /tmp (``mailbus-compare-<sha>``) with its own virtual
environment (``python3 -m venv --system-site-packages``, then ``pip install -e ./client -e
'.[test]'`` inside it: the shared system install is never touched, and dependencies already
installed are reused). Each benchmark is then run A, B, A, B, … ``--runs`` times per side,
every run under an exclusive flock of ``--lock`` so no other benchmark overlaps it, each
with the commit's own scripts (``--bench-from C`` runs C's bench/ against both commits'
code, e.g. to measure a figure an older harness does not record). A commit whose bench/
predates today's harness is measured with today's benchmarks ported onto it: when this
checkout's bench/baselines/ holds ``<its sha or abbreviation>.patch`` (bench/baselines/
README.md), it is applied to that side's bench/ after the checkout, and said so;
``--baseline-patch FILE`` applies FILE to A instead (``none``: nothing). Figures come back
through bench/results.py; printed as min / median / max per side and the ratio B/A of the
medians. Needs the local stack. The machine is shared: only a ratio from one such run is a
claim.
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
BASELINES = REPO / "bench" / "baselines"  # this checkout's, whichever commits are compared


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def bench_patch(sha: str, bench_from: str | None, explicit: str | None) -> Path | None:
    """The patch for this side's bench/: ``explicit`` (``none``: no patch), else, when the
    side runs its own bench/, the one bench/baselines/ holds for ``sha``, if any."""
    if explicit is not None:
        return None if explicit == "none" else Path(explicit).resolve()
    if bench_from is not None or not BASELINES.is_dir():
        return None
    name = compare_doc.baseline_patch(sha, (path.name for path in BASELINES.iterdir()))
    return None if name is None else BASELINES / name


def prepare_bench(tree: Path, bench: str, patch: Path | None) -> None:
    """Make ``tree``'s bench/ commit ``bench``'s, then apply ``patch`` to it. The worktree is
    reused across runs: first bench/ is reset to the worktree's own commit, files an earlier
    --bench-from or patch added included, so this gives the same bench/ every time."""
    git("reset", "--quiet", "--", "bench", cwd=tree)
    git("clean", "-fdq", "--", "bench", cwd=tree)
    git("checkout", bench, "--", "bench", cwd=tree)
    if patch is not None:
        try:
            git("apply", str(patch), cwd=tree)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"{patch} does not apply in {tree}: {exc.stderr.strip()}") from None


def checkout(
    commit: str, bench_from: str | None, explicit_patch: str | None = None
) -> tuple[Path, Path, Path | None]:
    """A worktree of ``commit`` with its own venv; (worktree, its python, the patch applied
    to its bench/ or None)."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    tree = Path(tempfile.gettempdir()) / f"mailbus-compare-{sha[:12]}"
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    bench = sha if bench_from is None else git("rev-parse", "--verify", bench_from)
    patch = bench_patch(sha, bench_from, explicit_patch)
    prepare_bench(tree, bench, patch)
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
    return tree, python, patch


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
    parser.add_argument(
        "--baseline-patch",
        metavar="FILE",
        help="apply FILE to A's bench/ instead of bench/baselines/<sha>.patch; none: nothing",
    )
    options = parser.parse_args()
    try:
        names = compare_doc.benches(options.bench)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        checked = {
            "A": checkout(options.a, options.bench_from, options.baseline_patch),
            "B": checkout(options.b, options.bench_from),
        }
    except ValueError as exc:  # two patches for one commit
        parser.error(str(exc))
    sides = {side: (tree, python) for side, (tree, python, _) in checked.items()}
    patched = {side: patch for side, (_, _, patch) in checked.items() if patch is not None}
    for side, patch in patched.items():
        commit = options.a if side == "A" else options.b
        print(f"{side} ({commit}): its bench/ patched with {shown_path(patch)}", flush=True)
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
        for side, patch in patched.items():
            print(f"{side}'s bench/: {shown_path(patch)} applied\n")
        print(
            compare_doc.table(compare_doc.pairs(figures["A"], figures["B"]), options.a, options.b),
            flush=True,
        )
    if options.save:
        Path(options.save).write_text(json.dumps(raw, indent=1))


def shown_path(path: Path) -> str:
    """``path`` relative to this checkout where it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


if __name__ == "__main__":
    main()
