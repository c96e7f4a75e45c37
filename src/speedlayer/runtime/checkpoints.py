"""A query's checkpoint must be whole: a damaged or missing log is a named error, never a fresh start.

Spark keeps a query's progress in its checkpoint directory: ``offsets/N`` (what batch N reads),
``commits/N`` (batch N is done), ``state/`` (the state store), ``sources/``. Spark itself refuses a
malformed ``offsets`` or ``commits`` file, but with a long message; and a checkpoint whose offset
log is gone while its commits or state remain looks to Spark like a new query, which would start
the input over from the beginning and write every result again. Both are told here in one line.

>>> spark_says = "Failed to read log file file:/s/checkpoints/w/commits/5. [MALFORMED_LOG_FILE] Log file was malformed"
>>> print(damaged_log(spark_says))  # doctest: +NORMALIZE_WHITESPACE
checkpoint file /s/checkpoints/w/commits/5 is damaged ([MALFORMED_LOG_FILE] Log file was malformed):
restore it from a backup, or start over with a new --state-dir
"""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError, EnvironmentProblem
from speedlayer.runtime.streamable import streaming_sources
from speedlayer.sources.base import Source

#: what Java (IOException) and Python (OSError errno 28) say when a write finds the disk full
NO_SPACE = "No space left on device"
#: free space under which a directory's disk counts as the full one (Spark frees its temporary files on failure)
FULL_BELOW_BYTES = 64 << 20
_DAMAGED = re.compile(r"Failed to read log file (?:file:)?(\S+?)\.? (.+)")
#: Hadoop's local file system, reading a file whose bytes no longer match the ``.<name>.crc`` written beside it
_CHECKSUM = re.compile(r"Checksum error: (?:file:)?(\S+) at \d+ exp: -?\d+ got: -?\d+")


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
    """One line for Spark's error about a malformed or incomplete checkpoint log file, or for a file that no
    longer matches its checksum, else None.

    >>> print(damaged_log("Checksum error: file:/s/checkpoints/w/offsets/5 at 0 exp: -3275 got: 2572"))
    ... # doctest: +NORMALIZE_WHITESPACE
    checkpoint file /s/checkpoints/w/offsets/5 is damaged (its bytes do not match its checksum, .5.crc):
    restore it from a backup, or start over with a new --state-dir
    """
    found, checksum = _DAMAGED.search(text), _CHECKSUM.search(text)
    if found:
        path, reason = found.group(1).removeprefix("file:"), found.group(2).split(" SQLSTATE")[0].strip().rstrip(".")
    elif checksum:
        path = checksum.group(1)
        reason = f"its bytes do not match its checksum, .{Path(path).name}.crc"
    else:
        return None
    if "/checkpoints/" not in path:  # a sink's or a source's file, not the run's state
        return f"file {path} is damaged ({reason}): restore it from a backup"
    return f"checkpoint file {path} is damaged ({reason}): restore it from a backup, or start over with a new --state-dir"


#: Spark's error classes for state a checkpoint holds in another layout than the query's operators read
#: (other schemas, or other operators: trips' session windows before its state processor)
_OTHER_STATE_LAYOUT = ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
                       "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA")


def other_state_layout(text: str, places: Iterable[Path]) -> str | None:
    """One line for state a checkpoint holds in a layout this query does not read, else None.

    ``places`` are the failed query's directories; the first is its checkpoint.

    >>> print(other_state_layout("[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema ...", [Path("cp/incidents")]))
    the state in checkpoint cp/incidents was written in another layout (by an earlier speedlayer, or other job code): \
start this output afresh with a new --state-dir, or delete that checkpoint directory
    """
    found = next((name for name in _OTHER_STATE_LAYOUT if name in text), None)
    if found is None:
        return None
    where = next(iter(places), None)
    return (f"the state in {f'checkpoint {where}' if where else 'its checkpoint'} was written in another layout "
            "(by an earlier speedlayer, or other job code): start this output afresh with a new --state-dir, "
            "or delete that checkpoint directory")


def _free_bytes(path: Path) -> int | None:
    """Free space for this user on the disk holding ``path`` (or its nearest existing parent)."""
    for place in (path, *path.parents):
        if place.exists():
            try:
                return shutil.disk_usage(place).free
            except OSError:
                return None
    return None


def disk_full(text: str, places: Iterable[Path]) -> str | None:
    """One line for a write refused because the disk is full, naming the full one of ``places``; else None.

    >>> told = disk_full("java.io.IOException: No space left on device", [Path("/nonexistent/cp")])
    >>> print(told)  # doctest: +NORMALIZE_WHITESPACE
    the disk under /nonexistent/cp is full (No space left on device): free space there or move it to a larger disk,
    then run the same command again: it resumes from the last committed batch
    """
    if NO_SPACE not in text:
        return None
    places = list(places)
    full = [p for p in places if (_free_bytes(p) or 0) < FULL_BELOW_BYTES] or places
    where = " or ".join(str(p) for p in full) or "the state directory or an output"
    return (f"the disk under {where} is full ({NO_SPACE}): free space there or move it to a larger disk, "
            "then run the same command again: it resumes from the last committed batch")


@contextmanager
def told_when_full(place: Path) -> Iterator[None]:
    """Turn a write under ``place`` refused for lack of space into one line (EnvironmentProblem).

    >>> with told_when_full(Path("/state")):  # doctest: +ELLIPSIS
    ...     raise OSError(errno.ENOSPC, "No space left on device")
    Traceback (most recent call last):
    speedlayer.core.errors.EnvironmentProblem: the disk under /state is full (No space left on device): ...
    """
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise EnvironmentProblem(disk_full(NO_SPACE, [place])) from None


def ready_checkpoint(source: Source, checkpoint: Path, fresh: bool, df: Any, stateless: bool) -> None:
    """Before a micro-batch query starts: the source writes into a ``fresh`` checkpoint (the generator's
    start), or checks that it can read an existing one. Continuous and real-time queries read no such file."""
    if stateless:
        return
    if fresh:
        source.prepare_checkpoint(checkpoint, streaming_sources(df))
    else:
        source.check_checkpoint(checkpoint)
