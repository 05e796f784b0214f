"""The intake's own settings, read from the environment once at start-up.

=================================  ==================================================
``MAILBUS_INTAKE_TOPIC``           topic of the domain events (``orders.events``)
``MAILBUS_INTAKE_MAPPINGS``        mappings file (default ``schemas/intake_mappings.json``)
``MAILBUS_INTAKE_BATCH``           events per statement and per commit (1000)
``MAILBUS_INTAKE_BATCH_WAIT``      seconds a partial batch waits for more (0.2)
``MAILBUS_INTAKE_GROUP``           consumer group / faust app id (``{prefix}-intake``)
``MAILBUS_INTAKE_SESSION_TIMEOUT``  seconds before a dead member's partitions move (30)
``MAILBUS_INTAKE_WEB_PORT``        faust's web server port (off)
``MAILBUS_STATE_DIR``              where faust keeps its data dir (a temp dir)
``MAILBUS_INTAKE_MAX_AGE``         older events (by occurred_at) are recorded, not mailed (3d)
=================================  ==================================================
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.settings import Settings

__all__ = ["IntakeConfig", "intake_max_age"]


@dataclass(frozen=True)
class IntakeConfig:
    topic: str
    dlq_topic: str
    group: str
    mappings_path: str | None
    batch_size: int
    batch_wait: float
    session_timeout: float
    web_port: int | None
    state_dir: Path
    max_age_s: float = 3 * 24 * 3600

    @classmethod
    def from_environ(
        cls, settings: Settings, environ: Mapping[str, str] | None = None
    ) -> IntakeConfig:
        env = os.environ if environ is None else environ

        def raw(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        state_root = raw("MAILBUS_STATE_DIR") or tempfile.gettempdir()
        group = _topic_name("MAILBUS_INTAKE_GROUP", raw("MAILBUS_INTAKE_GROUP"))
        topic = _topic_name("MAILBUS_INTAKE_TOPIC", raw("MAILBUS_INTAKE_TOPIC"))
        batch = _integer("MAILBUS_INTAKE_BATCH", raw("MAILBUS_INTAKE_BATCH"), 1000, 1, 50_000)
        return cls(
            topic=topic or "orders.events",
            dlq_topic=settings.intake_dlq_topic,
            group=group or f"{settings.topic_prefix}-intake",
            mappings_path=_mappings_path(raw("MAILBUS_INTAKE_MAPPINGS")),
            batch_size=batch,
            batch_wait=_seconds("MAILBUS_INTAKE_BATCH_WAIT", raw("MAILBUS_INTAKE_BATCH_WAIT"), 0.2),
            session_timeout=_seconds(
                "MAILBUS_INTAKE_SESSION_TIMEOUT",
                raw("MAILBUS_INTAKE_SESSION_TIMEOUT"),
                30.0,
                6,
                300,
            ),
            web_port=_port("MAILBUS_INTAKE_WEB_PORT", raw("MAILBUS_INTAKE_WEB_PORT")),
            state_dir=Path(state_root),
            max_age_s=_max_age(raw("MAILBUS_INTAKE_MAX_AGE")),
        )


def _topic_name(name: str, value: str | None) -> str | None:
    if value is not None and (
        len(value) > 249 or not all(ch.isalnum() or ch in "._-" for ch in value)
    ):
        raise ConfigError(name, "may contain only letters, digits, '.', '_' and '-'")
    return value


def _mappings_path(value: str | None) -> str | None:
    if value is not None and not Path(value).is_file():
        raise ConfigError("MAILBUS_INTAKE_MAPPINGS", f"no such file: {value}")
    return value


def _integer(name: str, value: str | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise ConfigError(name, f"expected a whole number from {low} to {high}, got {value!r}")
    return int(value)


def _seconds(
    name: str, value: str | None, default: float, low: float = 0.001, high: float = 60
) -> float:
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(name, f"expected seconds, got {value!r}") from None
    if not low <= seconds <= high:
        raise ConfigError(name, f"must be from {low:g} to {high:g} seconds, got {value!r}")
    return seconds


def intake_max_age(environ: Mapping[str, str]) -> float:
    """MAILBUS_INTAKE_MAX_AGE in seconds (`retention run` refuses a shorter window)."""
    return _max_age(environ.get("MAILBUS_INTAKE_MAX_AGE"))


def _max_age(value: str | None) -> float:
    from mailbus.kernel.durations import parse_duration

    return (
        IntakeConfig.max_age_s if value is None else parse_duration(value, "MAILBUS_INTAKE_MAX_AGE")
    )


def _port(name: str, value: str | None) -> int | None:
    return None if value is None else _integer(name, value, 0, 1, 65535)
