"""Each provider folder's imitation, ``providers/<name>/sandbox/``, which a checkout has
and a release does not (docs/installation.md#the-sandbox): looked up here by the
provider's name, so no module of a release imports one."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping

from mailbus.providers.registry import named
from mailbus.providers.sandbox.dialect import Imitation

__all__ = ["imitations"]


@functools.cache
def imitations() -> Mapping[str, Imitation]:
    """Every named provider's ``IMITATION``, by name; one without a ``sandbox/`` (SMTP,
    tried against its own server) is left out."""
    found: dict[str, Imitation] = {}
    for name in named():
        module_name = f"mailbus.providers.{name}.sandbox"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise  # an imitation that is there but breaks
            continue
        found[name] = module.IMITATION
    return found
