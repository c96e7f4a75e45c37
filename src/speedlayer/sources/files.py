"""``files:///landing?format=json`` — a landing directory of JSON-lines files (Spark's file source).

Each line is one event in the wire format; ``decode`` enforces the schema. New files are picked up
in order of modification time; ``max_files_per_trigger`` bounds a batch. The raw line is kept, so a
bad line becomes a dead letter instead of failing the batch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.errors import ConfigError, SourceError
from speedlayer.sources.base import Source
from speedlayer.uris import Uri, parse_options


class FilesOptions(BaseModel):
    format: Literal["json"] = "json"
    max_files_per_trigger: int | None = Field(None, gt=0)


class FilesSource(Source):
    scheme = "files"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if uri.host:
            raise ConfigError(f"{uri.display}: write files:///absolute/dir or files:relative/dir (no host part)")
        self.options: FilesOptions = parse_options(FilesOptions, uri.options, "files://")
        self.path = uri.local_path()

    def describe(self) -> str:
        return f"files:{self.path} ({self.options.format} lines)"

    def check(self) -> None:
        if not self.path.is_dir():
            raise SourceError(f"landing directory {self.path} does not exist: create it (mkdir -p) or fix the path")

    def _raw(self, df: DataFrame) -> DataFrame:
        return df.select(
            F.col("value"),
            F.lit(None).cast("string").alias("key"),
            F.col("_metadata.file_path").alias("offset"),
            F.col("_metadata.file_modification_time").alias("ingest_time"),
        ).where(F.trim("value") != "")

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        if max_events is not None:
            raise ConfigError("--max-events counts generated events; bound a files run with --trigger available-now")
        reader = spark.readStream.format("text")
        if self.options.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", self.options.max_files_per_trigger)
        return self._raw(reader.load(str(self.path)))

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        df = self._raw(spark.read.format("text").load(str(self.path)))
        return df.limit(max_events) if max_events is not None else df
