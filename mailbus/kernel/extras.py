"""Optional dependencies: what only some deployments need is an extra of the distribution
(pyproject.toml ``[project.optional-dependencies]``, docs/installation.md#extras), imported
at the adapter that uses it, inside :func:`extra`::

    with extra("ses"):
        import boto3

A module that is not installed then raises :class:`MissingExtra`, a configuration error
(exit status 2) naming the extra and the command that installs it, instead of a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from mailbus.kernel.errors import ConfigError

__all__ = ["MissingExtra", "extra"]


class MissingExtra(ConfigError):
    """``module`` is not installed: the extra ``name`` of mailbus brings it."""

    def __init__(self, name: str, module: str) -> None:
        super().__init__(
            f"mailbus[{name}]", f"{module} is not installed: pip install 'mailbus[{name}]'"
        )
        self.extra = name
        self.module = module


@contextlib.contextmanager
def extra(name: str) -> Iterator[None]:
    """Imports in this block come from the extra ``name``: a missing one is a MissingExtra."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise MissingExtra(name, exc.name or str(exc)) from exc
