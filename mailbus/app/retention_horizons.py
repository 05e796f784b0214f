"""The replay horizons MAILBUS_RETENTION must outlast (docs/retention.md#windows): while a
mail may still be replayed, its row must stay, or the replay is a new mail sent twice."""

from __future__ import annotations

from collections.abc import Mapping

from mailbus.consumer.core.capability import DEFAULT_LOOKUP_SETTLE_S
from mailbus.intake.config import intake_max_age
from mailbus.kernel.settings import Settings
from mailbus.providers.resend.sending import RESEND_WINDOW_S

__all__ = ["replay_horizons"]

# Providers whose idempotency key expires (seconds; the others keep it as long as the mail,
# which the key lives of docs/retention.md#a-key-enqueued-again cover, or have none).
_KEY_WINDOWS = {"resend": RESEND_WINDOW_S}


def replay_horizons(settings: Settings, environ: Mapping[str, str]) -> list[tuple[str, float]]:
    """``(setting, seconds)`` of every horizon in force: an intake event younger than
    MAILBUS_INTAKE_MAX_AGE is mailed when read again; a provider's key window
    (MAILBUS_IDEMPOTENCY_WINDOW, else the provider's documented one) and a look-up's settle
    time (MAILBUS_LOOKUP_SETTLE) are how long a call in doubt may still be answered."""
    horizons = [("MAILBUS_INTAKE_MAX_AGE", intake_max_age(environ))]
    key_window = settings.idempotency_window or _KEY_WINDOWS.get(settings.provider)
    if key_window is not None:
        horizons.append(("MAILBUS_IDEMPOTENCY_WINDOW", key_window))
    settle = settings.lookup_settle
    horizons.append(
        ("MAILBUS_LOOKUP_SETTLE", DEFAULT_LOOKUP_SETTLE_S if settle is None else settle)
    )
    return horizons
