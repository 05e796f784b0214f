"""What one provider folder gives the rooms: :class:`NamedProvider`, defined in its
``__init__.py`` as ``PROVIDER`` and found by :mod:`mailbus.providers.registry`.

A folder ``providers/<name>/`` holds everything mailbus knows about that provider
(docs/guides/adding-a-provider.md): ``sending.py`` (its dialect or adapter, with its
:class:`~mailbus.consumer.core.capability.Capability`), ``events.py`` and ``webhook.py``
(its delivery events and their route), ``sandbox/`` (the sandbox's imitation of it, in a
checkout only) and, where the provider publishes one, ``published/`` (its machine-readable
API description, with its licence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mailbus.consumer.adapter import Provider
from mailbus.consumer.core.capability import Capability
from mailbus.consumer.provider import Dialect, Endpoint, http_provider
from mailbus.feedback.native.routes import Clock, NativeReceiver
from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings

__all__ = ["NamedProvider"]


@dataclass(frozen=True)
class NamedProvider:
    """One provider: ``name`` is its MAILBUS_PROVIDER value and its folder's name.

    ``dialect`` builds its HTTP dialect (sent through :class:`HttpProvider`; run by the
    conformance suite against the sandbox); a provider that is no HTTP API (SES through
    its SDK, SMTP) has ``sender`` instead, and ``conformance`` names the test module that
    runs it against its emulator. ``receiver`` builds its webhook route when the settings
    enable one (None: the provider has no webhooks). What the sandbox serves of it is in its
    folder's ``sandbox/`` (every HTTP dialect has one: the conformance suite runs against
    it), which only a checkout has and nothing here imports."""

    name: str
    capability: Capability  # as documented; MAILBUS_IDEMPOTENCY_WINDOW may shorten a window
    dialect: Callable[[Settings], Dialect] | None = None
    sender: Callable[[Settings], Provider] | None = None
    conformance: str = "tests/integration/test_provider_conformance.py"
    receiver: Callable[[Settings, Clock], NativeReceiver | None] | None = None
    # where it is reached, as health reports name it; None: MAILBUS_PROVIDER_URL
    address: Callable[[Settings], str] | None = None

    @property
    def folder(self) -> Path:
        return Path(__file__).parent / self.name

    def url(self, settings: Settings) -> str:
        """Where MAILBUS_PROVIDER=<name> reaches it."""
        return settings.provider_url if self.address is None else self.address(settings)

    def provider(self, settings: Settings, endpoint: Endpoint) -> Provider:
        """The provider it sends through: an HTTP dialect at ``endpoint`` (MAILBUS_PROVIDER's
        or MAILBUS_FALLBACK_PROVIDER's), or its own sender, configured by its own settings.
        MAILBUS_IDEMPOTENCY_WINDOW may shorten its key's documented window, never lengthen
        it: a resend past the provider's window would go out under a key it forgot."""
        key = self.capability.key
        window = settings.idempotency_window
        longest = None if key is None else key.window_s
        if window is not None and longest is not None and window > longest:
            raise ConfigError(
                "MAILBUS_IDEMPOTENCY_WINDOW",
                f"{self.name} keeps a key {longest:g} s: a window may only be shorter,"
                f" got {window:g}",
            )
        if self.sender is not None:
            return self.sender(settings)
        assert self.dialect is not None, f"{self.name}: neither a dialect nor a sender"
        return http_provider(settings, endpoint, self.dialect(settings))
