"""The running build's version (docs/releasing.md): ``mailbus --version`` and the
``mailbus_build_info`` gauge both name the installed distribution's version."""

from __future__ import annotations

import platform
from importlib import metadata

import pytest
from prometheus_client import REGISTRY

from mailbus.app.cli import main
from mailbus.kernel import metrics  # noqa: F401  (the gauges are registered on import)


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"mailbus {metadata.version('mailbus')}"


def test_build_info_names_the_installed_version() -> None:
    labels = {"version": metadata.version("mailbus"), "python": platform.python_version()}
    assert REGISTRY.get_sample_value("mailbus_build_info", labels) == 1.0
