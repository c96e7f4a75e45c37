"""A query's checkpoint must be whole: a damaged or missing log is a named error, never a fresh start.

Spark keeps a query's progress in its checkpoint directory: ``offsets/N`` (what batch N reads),
``commits/N`` (batch N is done), ``state/`` (the state store), ``sources/``. Spark itself refuses a
malformed ``offsets`` or ``commits`` file, but with a long message; and a checkpoint whose offset
log is gone while its commits or state remain looks to Spark like a new query, which would start
the input over from the beginning and write every result again. Both are told here in one line.

>>> damaged_log("Failed to read log file file:/s/checkpoints/w/commits/5. [MALFORMED_LOG_FILE] Log file was malformed")
'checkpoint file /s/checkpoints/w/commits/5 is damaged ([MALFORMED_LOG_FILE] Log file was malformed): restore it from a backup, or start over with a new --state-dir'
"""

from __future__ import annotations

import re
from pathlib import Path

from speedlayer.errors import ConfigError

_DAMAGED = re.compile(r"Failed to read log file (?:file:)?(\S+?)\.? (.+)")


def _entries(folder: Path) -> list[str]:
    """The files of a checkpoint log folder, without Spark's hidden ``.crc`` and temporary files."""
    return [p.name for p in folder.iterdir() if not p.name.startswith(".")] if folder.is_dir() else []


def check_intact(checkpoint: Path, output: str) -> None:
    """Refuse a checkpoint that has lost its offset log but kept what depends on it.

    >>> check_intact(Path("/nonexistent"), "windows")  # a new query: nothing to check
    """
    if _entries(checkpoint / "offsets"):
        return
    kept = [name for name in ("commits", "state", "sources") if _entries(checkpoint / name)]
    if kept:
        raise ConfigError(
            f"the checkpoint of {output} ({checkpoint}) has no offset log but still holds {', '.join(kept)}: "
            "it would start over from the beginning of the input; restore offsets/ from a backup, "
            "or start over with a new --state-dir")


def damaged_log(text: str) -> str | None:
    """One line for Spark's error about a malformed or incomplete checkpoint log file, else None."""
    found = _DAMAGED.search(text)
    if found is None:
        return None
    path, reason = found.group(1).removeprefix("file:"), found.group(2).split(" SQLSTATE")[0].strip().rstrip(".")
    return f"checkpoint file {path} is damaged ({reason}): restore it from a backup, or start over with a new --state-dir"
