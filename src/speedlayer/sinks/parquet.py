"""``parquet:///abs/dir`` or ``parquet:rel/dir`` — Spark's file sink, exactly-once via its commit log."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.core.errors import SinkError
from speedlayer.core.modes import APPEND
from speedlayer.core.tables import TableRef
from speedlayer.core.uris import Uri
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target, no_options


class ParquetSink(Sink):
    scheme = "parquet"
    summary = "Parquet files in a directory, through Spark's file sink"
    guarantee = EXACTLY_ONCE
    modes = (APPEND,)

    def __init__(self, uri: Uri):
        super().__init__(uri)
        no_options(uri, ("partition_by",))
        self.path: Path = uri.local_path()
        self.partition_by = [c for c in uri.options.get("partition_by", "").split(",") if c]

    def shared_paths(self) -> dict[str, Path]:
        return {"the parquet directory": self.path}

    def describe(self) -> str:
        return f"parquet:{self.path}"

    def destination(self, job: str, output: str) -> tuple | None:
        return ("directory", str(self.path))

    def read_back(self) -> TableRef:
        return TableRef("parquet", str(self.path.resolve()))  # Spark's reader reads only the files _spark_metadata lists

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        log = self.path / "_spark_metadata"
        # The file sink skips batch ids already in its log: a new checkpoint would write nothing.
        if fresh_checkpoint and log.is_dir() and any(log.iterdir()):
            raise SinkError(
                f"{self.path} already holds the output of another run: remove it, or pass that run's --state-dir to resume it"
            )
        if self.path.exists() and not self.path.is_dir():
            raise SinkError(f"{self.path} is a file: the parquet sink needs a directory")

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        writer = writer.format("parquet").option("path", str(self.path))
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        return writer.start()
