"""Trigger specs: ``processing:5s``, ``available-now``, ``once``, ``continuous:1s``, ``realtime:5min``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from speedlayer.core.durations import format_duration, parse_duration
from speedlayer.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

KINDS = ("processing", "available-now", "once", "continuous", "realtime")
HINT = "use processing:5s, processing:0s, available-now, once, continuous:1s or realtime:5min"
#: Spark's default batch duration in real-time mode (``Trigger.RealTime()``): a checkpoint every 5 minutes
REALTIME_DEFAULT_MS = 300_000


@dataclass(frozen=True)
class Trigger:
    kind: str
    interval_ms: int = 0

    @property
    def continuous(self) -> bool:
        return self.kind == "continuous"

    @property
    def realtime(self) -> bool:
        """Spark's real-time mode: long-running batches of ``interval_ms``, rows processed as they arrive."""
        return self.kind == "realtime"

    @property
    def mode(self) -> str:
        """The processing mode, as messages name it: ``continuous mode``, ``real-time mode`` or ``micro-batch mode``."""
        return {"continuous": "continuous mode", "realtime": "real-time mode"}.get(self.kind, "micro-batch mode")

    @property
    def stateless(self) -> bool:
        """Whether queries under this trigger run without state: continuous mode has none, and Spark's
        real-time mode allows no shuffle and no deduplication (its operator allowlist, Spark 4.2)."""
        return self.kind in ("continuous", "realtime")

    @property
    def bounded(self) -> bool:
        """Whether the query stops by itself once the available input is processed."""
        return self.kind in ("available-now", "once")

    def __str__(self) -> str:
        if self.kind in ("processing", "continuous", "realtime"):
            return f"{self.kind}:{format_duration(self.interval_ms)}"
        return self.kind

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        interval = f"{self.interval_ms} milliseconds"
        if self.kind == "processing":
            return writer.trigger(processingTime=interval)
        if self.kind == "continuous":
            return writer.trigger(continuous=interval)
        if self.kind == "realtime":
            return writer.trigger(realTime=interval)
        if self.kind == "available-now":
            return writer.trigger(availableNow=True)
        return writer.trigger(once=True)


def parse_trigger(spec: str) -> Trigger:
    """Parse a trigger spec; ``realtime`` alone takes Spark's default batch duration (5 minutes).

    >>> parse_trigger("processing:5s"), parse_trigger("available-now")
    (Trigger(kind='processing', interval_ms=5000), Trigger(kind='available-now', interval_ms=0))
    >>> parse_trigger("realtime:")
    Trigger(kind='realtime', interval_ms=300000)
    """
    kind, _, interval = str(spec).strip().partition(":")
    kind = kind.lower()
    if kind not in KINDS:
        raise ConfigError(f"unknown trigger {spec!r}: {HINT}")
    if kind in ("available-now", "once"):
        if interval:
            raise ConfigError(f"trigger {kind} takes no interval (got {spec!r}): {HINT}")
        return Trigger(kind)
    if kind == "realtime" and not interval:
        return Trigger(kind, REALTIME_DEFAULT_MS)
    if not interval:
        raise ConfigError(f"trigger {kind} needs an interval, e.g. {kind}:1s")
    ms = parse_duration(interval, f"{kind} trigger interval")
    if kind == "continuous" and ms <= 0:
        raise ConfigError("a continuous trigger needs a checkpoint interval above zero, e.g. continuous:1s")
    if kind == "realtime" and ms <= 0:
        raise ConfigError("a realtime trigger needs a batch duration above zero, e.g. realtime:5min (or realtime: for 5 minutes)")
    return Trigger(kind, ms)
