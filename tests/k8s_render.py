"""Rendering the kustomize overlays in tests, with the kustomize `make validate` uses
(stack/validate.sh builds it once into the cache)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def kustomize_command() -> list[str]:
    """``[kustomize, build]`` (or ``kubectl kustomize`` where Go is missing)."""
    found = subprocess.run(
        ["bash", "-c", "source stack/validate.sh && kustomize_path"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.split()


def render(kustomize: list[str], path: str | Path) -> list[dict[str, Any]]:
    """The documents of one kustomization (a path relative to the repository, or any
    directory)."""
    built = subprocess.run([*kustomize, str(path)], cwd=REPO, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]
