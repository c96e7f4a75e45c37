"""Human durations (``500ms``, ``5s``, ``1min``, ``2h``) to milliseconds and back to Spark's form."""

from __future__ import annotations

import re

from speedlayer.core.errors import ConfigError

_UNITS_MS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str | int | float, what: str = "duration") -> int:
    """Parse a duration into whole milliseconds.

    >>> parse_duration("5s"), parse_duration("1min"), parse_duration("250ms"), parse_duration("0")
    (5000, 60000, 250, 0)
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        raise ConfigError(f"{what} {text!r} has no unit: write e.g. {text}s or {text}ms")
    raw = str(text).strip()
    if raw == "0":
        return 0
    match = _PATTERN.match(raw)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS_MS:
        raise ConfigError(f"invalid {what} {raw!r}: use a number with a unit, e.g. 500ms, 5s, 1min, 2h")
    return round(float(match.group(1)) * _UNITS_MS[unit])


def positive_duration(text: str, what: str) -> int:
    """Parse a duration that must be above zero."""
    ms = parse_duration(text, what)
    if ms <= 0:
        raise ConfigError(f"{what} must be longer than zero (got {text!r})")
    return ms


def spark_interval(ms: int) -> str:
    """Spark's interval string for a number of milliseconds.

    >>> spark_interval(10_000), spark_interval(1500)
    ('10 seconds', '1500 milliseconds')
    """
    if ms % 1000 == 0:
        return f"{ms // 1000} seconds"
    return f"{ms} milliseconds"


def format_duration(ms: int) -> str:
    """Short human form: ``format_duration(90_000) == '90s'``, ``format_duration(250) == '250ms'``."""
    if ms % 1000:
        return f"{ms}ms"
    return f"{ms // 1000}s"
