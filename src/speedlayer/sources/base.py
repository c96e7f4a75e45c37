"""What every source provides: a RAW streaming DataFrame (see ``speedlayer.core.schemas.RAW_SCHEMA``)."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, ClassVar

from pyspark.sql import DataFrame, SparkSession

from speedlayer.core.errors import ConfigError
from speedlayer.core.schemas import EventSchema
from speedlayer.core.uris import Uri


class Source(ABC):
    """An ingestion system seen as a stream of RAW rows (value, key, offset, ingest_time).

    Subclasses parse their URI options in ``__init__`` (raising ConfigError) and check reachability
    in ``check`` (raising SourceError), both before any query starts.
    """

    scheme: ClassVar[str]
    #: one line on what it reads (``speedlayer sources`` lists it)
    summary: ClassVar[str] = ""
    #: whether Spark's continuous mode can read it
    supports_continuous: ClassVar[bool] = False
    #: whether Spark's real-time mode (``trigger(realTime=...)``) can read it: Kafka only in Spark 4.3
    supports_realtime: ClassVar[bool] = False
    #: whether a restart replays exactly what a failed batch had read
    fault_tolerant: ClassVar[bool] = True
    #: whether ``read_stream`` can stop after ``max_events`` events (``--max-events``); a run from a source
    #: that cannot is refused before anything starts, with ``how_to_bound`` as the fix
    supports_max_events: ClassVar[bool] = True
    how_to_bound: ClassVar[str] = "bound the run with --duration"

    def __init__(self, uri: Uri):
        self.uri = uri
        #: the event schema of the stream it feeds (``plan_run`` sets it from the job; None until then):
        #: sources that read columns (csv, parquet) name them after it
        self.event_schema: EventSchema | None = None
        #: whether the run reads in continuous mode (``plan_run`` sets it): a source may read differently there
        self.continuous = False

    def check(self) -> None:
        """Fail early (one line) when the source cannot be read."""

    def check_plan(self, outputs: list[str]) -> None:
        """Fail (ConfigError) when this source cannot feed these outputs, each read by its own query."""

    def spark_packages(self) -> list[str]:
        """Maven coordinates of the jars it needs in the Spark session (e.g. a connector): the runner adds
        them to ``spark.jars.packages`` before the session starts."""
        return []

    def spark_conf(self) -> dict[str, str]:
        """Session settings it needs (e.g. Delta's SQL extension), added where the user set none."""
        return {}

    def batch_committed(self, query: str, progress_sources: list[dict]) -> None:
        """A batch of ``query`` committed; ``progress_sources`` are the ``sources`` of its progress report.

        Called on the driver after each batch, never for a batch that failed. A source may tell its
        system what was read (Kafka commits the end offsets to a consumer group, for lag tools). It
        must not raise: what it does is informational, the checkpoint stays the truth.
        """

    def check_session(self, spark: SparkSession) -> None:
        """Fail (one line) when the started session lacks what this source needs (e.g. a connector jar).

        The runner calls it right after the session starts, before any query.
        """

    def explain_failure(self, text: str) -> str | None:
        """One line for a query failure this source recognises in Spark's error ``text`` (None: not one of its own).

        Say what happened in the source's terms and what to do, e.g. which records were lost and the
        option that accepts the loss. The runner shows it instead of Spark's first line.
        """
        return None

    def shared_paths(self) -> dict[str, Path]:
        """Local directories executors read or write (what -> path); on a cluster each must be shared."""
        return {}

    def warnings(self) -> list[str]:
        """Notes shown before the run starts (``RunPlan.notes``), e.g. that the source is not fault-tolerant."""
        return []

    def pin(self, run_state: MutableMapping[str, Any]) -> None:
        """Record (or read back) what must stay the same across restarts of one run."""

    def pin_at_start(self, run_state: MutableMapping[str, Any]) -> bool:
        """Right before the run's first query starts: choose again what ``pin`` chose for a run that
        had nothing recorded (a clock that should start with the rows); True when ``run_state`` changed."""
        return False

    def check_trigger(self, kind: str) -> None:
        """Before start: raise a ConfigError if this source, as configured, cannot be read under a trigger
        of this ``kind`` (``processing``, ``available-now``, ``once``, ``continuous``, ``realtime``)."""

    def check_checkpoint(self, checkpoint: Path) -> None:
        """Before a query goes on from an existing micro-batch ``checkpoint``: raise a ConfigError if this
        source, as configured now, cannot read the offsets recorded there."""

    def prepare_checkpoint(self, checkpoint: Path, reads: list[str]) -> None:
        """Before a query starts on a fresh micro-batch ``checkpoint``: write what Spark's reader of this
        source should find there (the generator's start). ``reads``: the formats of the query's
        streaming sources, in Spark's order (``['rate']``: it reads the generator alone)."""

    def default_input(self, name: str) -> str | None:
        """The URI of the source a job's second stream ``name`` reads when the run gives none (``--name URI``),
        for this source as the run's main one; None: the run must give one.

        A generator-like source answers with itself making that kind of event, as ``generator://`` does:

        >>> open_source("generator://?seed=7").default_input("rides")  # doctest: +SKIP
        'generator://?seed=7&kind=rides'
        """
        return None

    def complete_input(self, name: str, uri: str) -> str:
        """The URI a job's second stream ``name`` reads when the run gives ``uri`` (``--name URI``), for this
        source as the run's main one: ``uri`` as it is, or completed where both streams must agree. A
        generator-like source fills in what the given URI leaves out from its own, as ``default_input`` would:

        >>> open_source("generator://?seed=7&rate=200").complete_input("rides", "generator://?kind=rides")  # doctest: +SKIP
        'generator://?seed=7&rate=200&kind=rides'
        """
        return uri

    def clock(self) -> int | None:
        """The event-time origin (epoch milliseconds) this source pinned, which the run's second streams may
        keep (``follow_clock``) so that both streams' event times line up; None: it keeps no clock.
        Asked after ``pin`` and again after ``pin_at_start`` moved it."""
        return None

    def follow_clock(self, clock_ms: int) -> bool:
        """As a second stream: keep the main source's clock ``clock_ms`` (called before ``pin``, and again
        when the main source chose its clock anew at start). True when it does; False when it keeps its
        own (a start given to it) or has none."""
        return False

    def describe(self) -> str:
        return self.uri.display

    def limit_partitions(self, partitions: int) -> None:
        """Read with at most this many partitions: fewer where the source can choose, and a
        ``ConfigError`` saying what to change where it cannot (a Kafka topic's partitions are its own).

        Continuous and real-time mode keep one task per source partition running (for good, or for
        a whole batch), so the runner shares the cores between its queries with this: a query with
        more partitions than cores would wait for ever for the cores its last tasks need.
        """

    @abstractmethod
    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The RAW stream; with ``max_events`` (only when ``supports_max_events``) no more than that many events."""

    def view_stream(self, spark: SparkSession, max_events: int | None = None, batches: int = 1) -> DataFrame:
        """The RAW stream a view of the run reads (the dashboard's tap, a batch every few seconds): as
        ``read_stream``, but where the source caps a batch, at most what ``batches`` of the run's own
        batches read, since a view's batch spans several of them and at the run's cap it would fall
        further behind at each. Default: ``read_stream``.
        """
        return self.read_stream(spark, max_events)

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        """The same RAW rows as a static DataFrame (for backfills and equivalence checks)."""
        raise NotImplementedError(f"{self.scheme} cannot be read as a batch")

    def batch_rows(self, interval_ms: int) -> int | None:
        """The most events one micro-batch reads, where the source caps them per trigger (or paces
        them, with a trigger every ``interval_ms``; 0 when batches run back to back); None if unbounded."""
        return None

    def events_read(self, progress_source: dict) -> int | None:
        """How many events a query has read, from one entry of its progress ``sources``; None if unknown."""
        return None

    def lag(self, progress_source: dict) -> int | None:
        """Entries waiting in the source beyond the end of the batch just read (one entry of a
        progress report's ``sources``); None where the source cannot tell. Called once per batch."""
        return None


def _offsets(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def newest_offsets(checkpoint: Path) -> list[Any]:
    """The offsets of each source in a checkpoint's newest ``offsets/N`` file, parsed from JSON (a line
    that is not JSON as it stands); empty when there is none yet."""
    directory = checkpoint / "offsets"
    numbers = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.is_dir() else []
    if not numbers:
        return []
    lines = (directory / str(max(numbers))).read_text().splitlines()[2:]  # after the version and the metadata
    return [parsed if (parsed := _offsets(line)) is not None else line for line in lines]


def count_behind(progress_source: dict, field: str) -> int | None:
    """``latestOffset - endOffset`` of a source whose offset is one count ``{field: n}`` (a dict, or its JSON
    as Spark's progress gives it); None when either is missing or not of that shape.

    >>> count_behind({"endOffset": '{"n": 5}', "latestOffset": {"n": 9}}, "n"), count_behind({"endOffset": 5}, "n")
    (4, None)
    """
    end, latest = (_offsets(progress_source.get(key)) for key in ("endOffset", "latestOffset"))
    if not (isinstance(end, dict) and isinstance(latest, dict) and field in end and field in latest):
        return None
    return max(0, int(latest[field]) - int(end[field]))


def partitions_behind(progress_source: dict) -> dict[tuple[str, str], int]:
    """``(topic, partition) -> latestOffset - endOffset`` for sources whose offsets are nested
    ``{topic: {partition: offset}}`` (Kafka); empty otherwise.

    >>> partitions_behind({"endOffset": {"t": {"0": 5, "1": 7}}, "latestOffset": {"t": {"0": 9, "1": 7}}})
    {('t', '0'): 4, ('t', '1'): 0}
    """
    end, latest = _offsets(progress_source.get("endOffset")), _offsets(progress_source.get("latestOffset"))
    if not isinstance(end, dict) or not isinstance(latest, dict):
        return {}
    try:
        return {(topic, part): max(0, int(off) - int(end[topic][part]))
                for topic, parts in latest.items() for part, off in parts.items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


def partition_lag(progress_sources: list[dict]) -> dict[tuple[str, str], int]:
    """``partitions_behind`` over every source of a progress report, in topic and partition order."""
    return dict(sorted((k, v) for entry in progress_sources for k, v in partitions_behind(entry).items()))


def offsets_behind(progress_source: dict) -> int | None:
    """Sum of ``partitions_behind`` over partitions; None when the offsets are not nested that way.

    >>> offsets_behind({"endOffset": {"t": {"0": 5, "1": 7}}, "latestOffset": {"t": {"0": 9, "1": 7}}})
    4
    """
    behind = partitions_behind(progress_source)
    return sum(behind.values()) if behind else None


def end_offsets(progress_source: dict) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> endOffset`` of a batch, for nested ``{topic: {partition: offset}}`` offsets.

    >>> end_offsets({"endOffset": '{"t": {"0": 5, "1": 7}}'})
    {('t', 0): 5, ('t', 1): 7}
    """
    end = _offsets(progress_source.get("endOffset"))
    if not isinstance(end, dict):
        return {}
    try:
        return {(topic, int(part)): int(off) for topic, parts in end.items() for part, off in parts.items()}
    except (TypeError, ValueError, AttributeError):
        return {}


def snake_case_options(options: Mapping[str, str], where: str) -> dict[str, str]:
    """URI options with Spark's camelCase names spelled the snake_case way; a name given twice is refused.

    >>> snake_case_options({"maxFilesPerTrigger": "1", "format": "csv"}, "files://")
    {'max_files_per_trigger': '1', 'format': 'csv'}
    """
    result: dict[str, str] = {}
    for key, value in options.items():
        name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()
        if name in result:
            raise ConfigError(f"{where} option {name!r} is given twice (also as {key!r}): keep one")
        result[name] = value
    return result
