"""Durations and rates as settings and options spell them: ``24h``, ``5m,30m,2h``, ``60/min``.

Pure parsers; bad input raises :class:`~mailbus.kernel.errors.ConfigError` naming the
setting or option, so a command exits 2 with one line.
"""

from __future__ import annotations

import re

from mailbus.kernel.errors import ConfigError

__all__ = ["parse_duration", "parse_rate", "parse_schedule"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_SCHEDULE = 100
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|min|m|h|hour)\s*$")
_PER = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0}


def parse_schedule(text: str, name: str = "MAILBUS_RETRY_SCHEDULE") -> tuple[float, ...]:
    """``"5m,30m,2h,24h"`` -> seconds; units s, m, h, d. Bad input -> ConfigError(name)."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise ConfigError(name, f"expected delays like 5m,30m,2h,24h, got {text!r}")
    if len(parts) > _MAX_SCHEDULE:
        raise ConfigError(name, f"at most {_MAX_SCHEDULE} delays")
    return tuple(parse_duration(part, name) for part in parts)


def parse_duration(part: str, name: str) -> float:
    """``"24h"`` -> seconds: a positive whole number with a unit s, m, h or d."""
    part = part.strip()
    unit = _UNITS.get(part[-1:].lower())
    if unit is None or not part[:-1].isdigit():
        raise ConfigError(name, f"{part!r} is not a whole number with a unit s, m, h or d")
    seconds = int(part[:-1]) * unit
    if seconds <= 0:
        raise ConfigError(name, f"{part!r}: every delay must be positive")
    return seconds


def parse_rate(text: str, option: str = "--rate") -> float | None:
    """``N/min`` (also ``N/s``, ``N/h``) as events per second; ``0`` (or ``0/min``): no
    pace, None."""
    if text.strip() == "0":
        return None
    rate = _RATE.match(text)
    if not rate or float(rate.group(1)) < 0:
        raise ConfigError(option, f"expected N/min such as 60/min, or 0; got {text!r}")
    per_second = float(rate.group(1)) / _PER[rate.group(2)]
    return per_second or None
