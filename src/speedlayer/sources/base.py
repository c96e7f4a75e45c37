"""What every source provides: a RAW streaming DataFrame (see ``speedlayer.schemas.RAW_SCHEMA``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, MutableMapping

from pyspark.sql import DataFrame, SparkSession

from speedlayer.uris import Uri


class Source(ABC):
    """An ingestion system seen as a stream of RAW rows (value, key, offset, ingest_time).

    Subclasses parse their URI options in ``__init__`` (raising ConfigError) and check reachability
    in ``check`` (raising SourceError), both before any query starts.
    """

    scheme: ClassVar[str]
    #: whether Spark's continuous mode can read it
    supports_continuous: ClassVar[bool] = False
    #: whether a restart replays exactly what a failed batch had read
    fault_tolerant: ClassVar[bool] = True

    def __init__(self, uri: Uri):
        self.uri = uri

    def check(self) -> None:
        """Fail early (one line) when the source cannot be read."""

    def pin(self, run_state: MutableMapping[str, Any]) -> None:
        """Record (or read back) what must stay the same across restarts of one run."""

    def describe(self) -> str:
        return self.uri.display

    @abstractmethod
    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The RAW stream; with ``max_events`` it yields no more than that many events."""

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The same RAW rows as a static DataFrame (for backfills and equivalence checks)."""
        raise NotImplementedError(f"{self.scheme} cannot be read as a batch")

    def events_read(self, progress_source: dict) -> int | None:
        """How many events a query has read, from one entry of its progress ``sources``; None if unknown."""
        return None
