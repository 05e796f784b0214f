"""The replay horizons MAILBUS_RETENTION must outlast (docs/retention.md#windows): while a
mail may still be replayed, its row must stay, or the replay is a new mail sent twice."""

from __future__ import annotations

from collections.abc import Mapping

from mailbus.consumer.core.capability import DEFAULT_LOOKUP_SETTLE_S
from mailbus.intake.config import intake_max_age
from mailbus.kernel.settings import Settings
from mailbus.providers.registry import key_window_s

__all__ = ["replay_horizons"]


def replay_horizons(settings: Settings, environ: Mapping[str, str]) -> list[tuple[str, float]]:
    """``(setting, seconds)`` of every horizon in force: an intake event younger than
    MAILBUS_INTAKE_MAX_AGE is mailed when read again; a provider's key window
    (MAILBUS_IDEMPOTENCY_WINDOW, else the provider's documented one) and a look-up's settle
    time (MAILBUS_LOOKUP_SETTLE) are how long a call in doubt may still be answered."""
    horizons = [("MAILBUS_INTAKE_MAX_AGE", intake_max_age(environ))]
    # a key kept as long as the mail is covered by the key lives (docs/retention.md)
    key_window = settings.idempotency_window or key_window_s(settings.provider)
    if key_window is not None:
        horizons.append(("MAILBUS_IDEMPOTENCY_WINDOW", key_window))
    settle = settings.lookup_settle
    horizons.append(
        ("MAILBUS_LOOKUP_SETTLE", DEFAULT_LOOKUP_SETTLE_S if settle is None else settle)
    )
    return horizons
