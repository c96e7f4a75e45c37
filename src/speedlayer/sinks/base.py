"""What every sink provides: a guarantee, the output modes it accepts, and how to start a query."""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.sql.types import StructType

from speedlayer.core.errors import ConfigError
from speedlayer.core.tables import TableRef
from speedlayer.core.uris import Uri

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"


@dataclass(frozen=True)
class Target:
    """What the runner tells a sink about the query it starts."""

    job: str
    output: str
    query_name: str
    #: continuous or real-time mode: Spark runs no Python per batch there, so the sink must write
    #: through a JVM sink of Spark's own (the console sink falls back to Spark's)
    jvm_only: bool = False
    #: output mode of the query (append, update, complete)
    mode: str = "append"
    #: the columns that identify a row of this output (upserting sinks key on them)
    key: tuple[str, ...] = ()
    #: where rows the destination refuses are kept as dead letters (a folder), None: they fail the batch
    rejected: str | None = None
    #: whether the query starts from an empty checkpoint (a new run), so its batch ids count from 0
    #: again: a sink that keys its writes by batch refuses a destination holding another run's
    fresh_checkpoint: bool = False


class Sink(ABC):
    """One destination for one named output.

    ``__init__`` parses the URI (ConfigError); ``check`` runs before the query starts and fails
    with one line when the destination cannot take this output; ``start`` finishes the writer the
    runner prepared (query name, output mode, checkpoint, trigger) and starts it.
    """

    scheme: ClassVar[str]
    #: one line on what it writes (``speedlayer sinks`` lists it)
    summary: ClassVar[str] = ""
    guarantee: ClassVar[str]
    modes: ClassVar[tuple[str, ...]]
    supports_continuous: ClassVar[bool] = False
    #: whether Spark's real-time mode (``trigger(realTime=...)``) can write to it: JVM sinks only
    supports_realtime: ClassVar[bool] = False
    #: what to use instead where it cannot run (continuous and real-time modes), said in the refusal
    instead: ClassVar[str] = ""
    #: whether it shows each batch's newest rows to a person through its ``display`` attribute, a
    #: function of a ``sinks.console.BatchView``: the live view and the dashboard's feeds take it over
    shows_batches: ClassVar[bool] = False
    #: whether it writes through ``foreachBatch`` (so it can take outputs computed per micro-batch)
    writes_batches: ClassVar[bool] = False

    def __init__(self, uri: Uri):
        self.uri = uri

    def describe(self) -> str:
        return self.uri.display

    def destination(self, job: str, output: str) -> tuple | None:
        """Where this output's rows land (a directory, a table, a key), so that two outputs writing to
        the same place are refused before start; None where that cannot clash."""
        return None

    def query_name(self, planned: str) -> str:
        """The name of the query that writes here (default: the planned one, ``<job>_<output>``); a sink
        that names its query otherwise says so before the run, so progress and summaries find it."""
        return planned

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        """Fail early when this output cannot be written here."""

    def records(self, df: DataFrame, target: Target) -> DataFrame:
        """The rows this sink writes, from the output's rows (default: unchanged)."""
        return df

    @property
    def has_batch_function(self) -> bool:
        """Whether this sink gives its writes as a ``batch_function`` (what a shared query calls), not
        only through a ``start`` of its own (a user's sink, say).

        >>> ConsoleSink(...).has_batch_function  # doctest: +SKIP
        True
        """
        return self.writes_batches and type(self).batch_function is not Sink.batch_function

    def batch_function(self, schema: StructType, target: Target) -> Callable[[DataFrame, int], None]:
        """The ``foreachBatch`` function that writes this output's micro-batches, for a sink that
        ``writes_batches``: the runner calls it once per query (the job's shared query among them).

        >>> write = sink.batch_function(df.schema, Target("fleet", "alerts", "q"))  # doctest: +SKIP
        >>> write(batch_df, 0)                                                      # doctest: +SKIP
        """
        raise NotImplementedError(f"sink {self.scheme}: writes no micro-batches of its own")

    def read_back(self) -> TableRef | None:
        """The table its committed rows can be read back from in batch, which ``speedlayer sql`` shows as
        a view; None where they cannot be (a console, a broker, a database speedlayer holds no password of).

        >>> ParquetSink(parse_uri("parquet:out/windows")).read_back().format  # doctest: +SKIP
        'parquet'
        """
        return None

    def shared_paths(self) -> dict[str, Path]:
        """Local directories executors write (what -> path); on a cluster each must be shared."""
        return {}

    def spark_packages(self) -> list[str]:
        """Maven coordinates of the jars it needs in the Spark session (e.g. a connector): the runner adds
        them to ``spark.jars.packages`` before the session starts."""
        return []

    def spark_conf(self) -> dict[str, str]:
        """Session settings it needs (e.g. Delta's SQL extension), added where the user set none."""
        return {}

    def check_session(self, spark: SparkSession) -> None:
        """Fail before start when the session lacks something this sink needs (e.g. a connector jar)."""

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        """Start the query on the prepared writer (default: ``foreachBatch`` with ``batch_function``;
        a sink that starts its own kind of query overrides it)."""
        return writer.foreachBatch(self.batch_function(df.schema, target)).start()


def no_options(uri: Uri, allowed: tuple[str, ...] = ()) -> None:
    """Refuse options a sink does not know."""
    for key in uri.options:
        if key not in allowed:
            known = ", ".join(allowed) if allowed else "none"
            raise ConfigError(f"{uri.scheme}: sink has no option {key!r}; known options: {known}")
