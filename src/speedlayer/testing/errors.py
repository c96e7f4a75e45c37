"""What the testing helpers raise: a failed check is an AssertionError (pytest shows it as a failed
assertion) and a SpeedlayerError whose message says what to change; a helper used wrongly raises
``ConfigError`` (``speedlayer.core.errors``)."""

from __future__ import annotations

import re

from speedlayer.core.errors import SpeedlayerError

#: lines of a row diff a failed check shows
DIFF_LINES = 40


class CheckFailed(SpeedlayerError, AssertionError):
    """The job, source or sink under test broke a promise a helper checks."""


class StreamBatchMismatch(CheckFailed):
    """A job's stream gave other rows than the same function on the same events in batch."""


class NothingCompared(CheckFailed):
    """A check had nothing to compare, so passing it would prove nothing (more data is needed)."""


class ReplayMismatch(CheckFailed):
    """A source read the same micro-batch again and gave other rows."""


class OffsetProblem(CheckFailed):
    """A source gave rows without an offset, or two rows the same offset."""


class SinkNotIdempotent(CheckFailed):
    """An exactly-once sink changed what it holds when a micro-batch was written again."""


class SinkContentMismatch(CheckFailed):
    """A sink holds other rows than the micro-batches written to it in its output mode."""


def shown_diff(error: Exception, lines: int = DIFF_LINES) -> str:
    """The row diff of ``assertDataFrameEqual``'s error, without its colours, cut to ``lines`` lines.

    >>> shown_diff(ValueError("\x1b[31m+ Row(a=1)\x1b[0m"))
    '+ Row(a=1)'
    """
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).splitlines()
    return "\n".join(text[:lines] + ([f"... ({len(text) - lines} more line(s))"] if len(text) > lines else []))
