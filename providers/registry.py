"""Every provider folder, found by its name: what the app hands the consumer (the provider
MAILBUS_PROVIDER names), the webhooks (the routes the settings enable) and the retention
check (a key's window). No room imports a provider (pyproject.toml's layers): the app looks
them up here and passes them in.

A provider is a subpackage of :mod:`mailbus.providers` whose ``__init__`` defines
``PROVIDER``, a :class:`~mailbus.providers.room.NamedProvider`; adding its folder adds it
(docs/guides/adding-a-provider.md)."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import time
from collections.abc import Mapping

import mailbus.providers
from mailbus.feedback.native.routes import Clock, NativeReceiver
from mailbus.kernel.settings import Settings
from mailbus.providers.room import NamedProvider

__all__ = ["key_window_s", "named", "receivers", "senders"]


@functools.cache
def named() -> Mapping[str, NamedProvider]:
    """Every provider folder's ``PROVIDER``, by name."""
    found: dict[str, NamedProvider] = {}
    for module in pkgutil.iter_modules(mailbus.providers.__path__):
        if not module.ispkg or module.name == "sandbox":
            continue  # the imitations' shared kit, a checkout's only
        package = importlib.import_module(f"mailbus.providers.{module.name}")
        entry = getattr(package, "PROVIDER", None)
        if not isinstance(entry, NamedProvider) or entry.name != module.name:
            raise TypeError(f"providers/{module.name}/__init__.py: PROVIDER is no NamedProvider")
        found[entry.name] = entry
    return found


def senders() -> Mapping[str, NamedProvider]:
    """MAILBUS_PROVIDER's value -> the named provider the consumer sends through (the
    consumer's own ``http`` dialect is not among them)."""
    return named()


def receivers(settings: Settings, clock: Clock = time.time) -> list[NativeReceiver]:
    """The webhook routes the settings enable, one per provider at most."""
    routes = []
    for entry in named().values():
        route = entry.receiver(settings, clock) if entry.receiver is not None else None
        if route is not None:
            routes.append(route)
    return routes


def key_window_s(name: str) -> float | None:
    """The documented window of the provider's idempotency key; None: it keeps the key as
    long as the mail, has none, or is no named provider."""
    entry = named().get(name)
    key = None if entry is None else entry.capability.key
    return None if key is None else key.window_s
