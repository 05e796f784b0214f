"""Every schemas/*.avsc stays backward compatible with each version before it.

Versions come from two places: copies kept in schemas/history/<stem>.<n>.avsc (numbered
in order) and, in a git checkout, every committed version of the file (``git log``).
The working copy is compared with the newest of them, and each version with the next.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mailbus.schemas.compat import backward_problems

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"
SHIPPED = sorted(SCHEMAS.glob("*.avsc"))


def _kept_versions(schema: Path) -> list[str]:
    kept = SCHEMAS / "history"
    numbered = sorted(
        kept.glob(f"{schema.stem}.*.avsc"), key=lambda path: int(path.suffixes[-2][1:])
    )
    return [path.read_text() for path in numbered]


def _git_versions(schema: Path) -> list[str]:
    """Committed versions of ``schema``, oldest first (none outside a git checkout)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return []
    relative = schema.relative_to(REPO).as_posix()
    log = subprocess.run(
        ["git", "-C", str(REPO), "log", "--format=%H", "--follow", "--", relative],
        capture_output=True,
        text=True,
        check=True,
    )
    versions = []
    for commit in reversed(log.stdout.split()):
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:{relative}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode == 0 and (not versions or versions[-1] != shown.stdout):
            versions.append(shown.stdout)
    return versions


def test_there_are_schemas_and_order_placed_is_one() -> None:
    names = {path.name for path in SHIPPED}
    assert {"order_placed.avsc", "send_pointer.avsc", "dead_letter.avsc"} <= names


@pytest.mark.parametrize("schema", SHIPPED, ids=[path.name for path in SHIPPED])
def test_each_version_reads_the_one_before(schema: Path) -> None:
    current = schema.read_text()
    chains = [_kept_versions(schema), _git_versions(schema)]
    for versions in chains:
        sequence = [*versions, current]
        for older, newer in itertools.pairwise(sequence):
            if older == newer:
                continue
            problems = backward_problems(older, newer)
            assert problems == [], f"{schema.name}: {problems}"


def test_order_placed_keeps_its_first_version() -> None:
    assert _kept_versions(SCHEMAS / "order_placed.avsc"), "history/order_placed.1.avsc is gone"


_V1 = {
    "type": "record",
    "name": "E",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def _with_fields(*fields: dict[str, object]) -> str:
    return json.dumps({**_V1, "fields": list(fields)})


def test_compatible_changes_pass() -> None:
    id_, count, note = _V1["fields"]  # type: ignore[misc]
    added = {"name": "extra", "type": "string", "default": ""}
    widened = {"name": "count", "type": "long"}
    optional = {"name": "count", "type": ["null", "int"], "default": None}
    old = json.dumps(_V1)
    assert backward_problems(old, _with_fields(id_, count, note, added)) == []
    assert backward_problems(old, _with_fields(id_, widened, note)) == []
    assert backward_problems(old, _with_fields(id_, optional, note)) == []
    assert backward_problems(old, _with_fields(id_, count)) == []  # note had a default


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ([{"name": "id", "type": "string"}, {"name": "note", "type": "string"}], "count"),
        (
            [
                {"name": "id", "type": "string"},
                {"name": "count", "type": "int"},
                {"name": "new", "type": "string"},
            ],
            "new field without a default",
        ),
        ([{"name": "id", "type": "long"}, {"name": "count", "type": "int"}], "type changed"),
        ([{"name": "id", "type": "string"}, {"name": "count", "type": "string"}], "type changed"),
    ],
    ids=["removed-without-default", "added-without-default", "string-to-long", "int-to-string"],
)
def test_incompatible_changes_are_named(fields: list[dict[str, object]], expected: str) -> None:
    problems = backward_problems(json.dumps(_V1), _with_fields(*fields))
    assert problems and any(expected in problem for problem in problems), problems
