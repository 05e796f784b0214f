"""constraints.txt (the image's exact versions) stays in step with pyproject.toml (issue 22,
item 10): `make test` runs `stack/constraints.py --check`; this test fails on a drift that
does not depend on the machine's installed packages."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("constraints", REPO / "stack/constraints.py")
assert _spec is not None and _spec.loader is not None
constraints = importlib.util.module_from_spec(_spec)
sys.modules["constraints"] = constraints
_spec.loader.exec_module(constraints)


def committed() -> str:
    return (REPO / "constraints.txt").read_text()


def test_the_file_was_written_from_todays_dependency_lists() -> None:
    first = committed().splitlines()[0]
    assert (
        first
        == f"# pyproject dependencies digest: {constraints.digest(constraints.dependencies())}"
    ), "pyproject dependencies changed: run `python stack/constraints.py --write`"


def test_every_direct_dependency_is_pinned_inside_its_range() -> None:
    pins = constraints.pins(committed())
    for text in constraints.dependencies():
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "mailbus-client":  # built from client/, never pinned
            continue
        assert name in pins, f"{name} has no pin in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} is outside {requirement.specifier}"
        )


def test_a_drift_is_caught() -> None:
    requirements = [*constraints.dependencies(), "newdependency>=1"]
    assert constraints.digest(requirements) != constraints.digest(constraints.dependencies())
    ranged = [t.replace("httpx>=0.27,<1", "httpx>=2") for t in constraints.dependencies()]
    assert not Requirement(next(t for t in ranged if t.startswith("httpx"))).specifier.contains(
        constraints.pins(committed())["httpx"]
    )


def test_the_image_installs_with_the_constraints() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "-c constraints.txt" in dockerfile or "--constraint constraints.txt" in dockerfile
    froms = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    base = dockerfile.split("ARG PYTHON_IMAGE=")[1].split()[0]
    assert "@sha256:" in base and len(base.split("@sha256:")[1]) == 64


def test_the_image_takes_extras_from_a_build_argument() -> None:
    """`--build-arg EXTRAS=tracing` installs `.[tracing]`, an empty one `.` alone; the
    default is every runtime extra (docs/installation.md#extras)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    assert 'ARG EXTRAS="all"' in dockerfile
    install = next(line for line in dockerfile.splitlines() if "./client " in line)
    target = install.split("./client ")[1].split()[0]
    for extras, expected in (("", "."), ("tracing", ".[tracing]")):
        shell = subprocess.run(
            ["sh", "-c", f"echo {target}"], env={"EXTRAS": extras}, capture_output=True, text=True
        )
        assert shell.stdout.strip() == expected


def test_the_image_runs_as_a_numeric_non_root_user_and_ships_no_sandbox() -> None:
    """The default target (the last stage) runs as 10001; only `--target sandbox` adds the
    checkout's fake provider (docs/installation.md#the-sandbox)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    stages = dockerfile.split("\nFROM ")
    assert stages[-1].startswith("runtime AS production")
    runtime = next(stage for stage in stages if " AS runtime" in stage.splitlines()[0])
    instructions = [line for line in runtime.splitlines() if not line.startswith("#")]
    assert "USER 10001:10001" in instructions
    assert not any("sandbox" in line for line in instructions)
    assert "SETUPTOOLS_SCM_PRETEND_VERSION=$RELEASE_VERSION" in dockerfile
