"""The running build's version: the installed distribution's, which setuptools-scm took
from the git tag it was built at (docs/releasing.md). Shown by ``mailbus --version`` and
exported as ``mailbus_build_info{version}``."""

from __future__ import annotations

from importlib import metadata

__all__ = ["UNKNOWN", "installed_version"]

UNKNOWN = "unknown"  # a checkout run without ever being installed


def installed_version() -> str:
    try:
        return metadata.version("mailbus")
    except metadata.PackageNotFoundError:
        return UNKNOWN
