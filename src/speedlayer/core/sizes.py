"""Sizes: ``512m``, ``1g`` to bytes and back, and what a directory holds on disk."""

from __future__ import annotations

import os
import re
from pathlib import Path

from speedlayer.core.errors import ConfigError

#: binary units, as Spark reads ``spark.driver.memory`` (``512m`` is 512 MiB)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt])(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int, what: str = "size") -> int:
    """A size with its unit (k, m, g, t: binary, as Spark reads them) in bytes; a bare number or another
    unit is a ConfigError that says how to write it.

    >>> parse_size("512m"), parse_size("1g"), parse_size("1.5KB"), parse_size("2GiB")
    (536870912, 1073741824, 1536, 2147483648)
    """
    raw = str(text).strip()
    match = _PATTERN.match(raw)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"invalid {what} {raw!r}: give a size above zero with its unit, e.g. 512m or 1g (k, m, g, t)")
    return round(float(match.group(1)) * _UNITS[match.group(2).lower()])


def human_size(size: int) -> str:
    """Bytes as people read them, in binary units like the flags.

    >>> human_size(0), human_size(1536), human_size(4_500_000_000)
    ('0 B', '1.5 KiB', '4.2 GiB')
    """
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def tree_size(path: Path) -> int:
    """The bytes of every file under ``path`` (Spark's hidden ``.crc`` files too), 0 where there is none.

    One walk of the directory, no file opened; a file deleted during the walk (Spark purges logs
    while a query runs) counts as gone.

    >>> tree_size(Path("/nonexistent"))
    0
    """
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total
