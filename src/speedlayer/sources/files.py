"""``files:///landing?format=json|text|csv|parquet`` — a landing directory read with Spark's file source.

Every format yields RAW rows whose ``value`` is the event's JSON text, so ``decode`` validates
them all the same way and a bad row becomes a dead letter instead of failing the batch:

- ``json``: one event per line (JSON lines), kept as written. ``text`` reads the same way, one
  payload per line, for jobs whose payloads are plain text (``wordcount``). Each file is read whole by one task
  (that is what gives every line its number), so keep landing files to some hundred MB each.
- ``csv``: a header row with the wire-format field names (``event_id,vehicle_id,event_time,
  speed_kmh,lat,lon``), in that order; every field is read as text and the row becomes
  ``to_json(struct(...))``. A row with too few or too many fields keeps its raw line as payload.
  A file whose header differs fails the query with a message naming the file. Files are read
  whole by one task each, like ``json``.
- ``parquet``: the event fields by name (other columns are ignored, a missing one is a dead
  letter). Column types are those of the oldest file present at start (the wire types — strings,
  doubles, timestamps or epoch ms — when the directory is empty); later files must use the same
  types. Timestamps must be in ms or µs (pandas: ``to_parquet(..., coerce_timestamps="us")``).

``offset`` is ``<file path>:<n>``: the line number in the file (json, text, csv: the header is
line 1) or the row number (parquet), counting from 1; unique per row and the same when a batch is
read again. ``ingest_time`` is the file's modification time; new files are taken in order of
modification time (``latest_first=true`` reverses it).

Options (Spark's camelCase spellings work too): ``max_files_per_trigger``, ``latest_first``,
``clean_source=archive|delete`` (after a batch commits, move processed files to
``source_archive_dir`` or delete them).

    files:///data/landing?format=csv&max_files_per_trigger=10&clean_source=archive&source_archive_dir=/data/done
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from speedlayer.core.errors import ConfigError, SourceError
from speedlayer.core.schemas import SPARK_TYPES
from speedlayer.core.schemas import Field as EventField
from speedlayer.core.uris import Uri, parse_options
from speedlayer.sources.base import Source, snake_case_options

_CORRUPT = "_corrupt_record"


class FilesOptions(BaseModel):
    format: Literal["json", "text", "csv", "parquet"] = "json"
    max_files_per_trigger: int | None = Field(None, gt=0)
    latest_first: bool = False
    clean_source: Literal["off", "archive", "delete"] = "off"
    source_archive_dir: str | None = None


def _payload(columns: list[str], names: list[str] | None = None) -> Column:
    return F.to_json(F.struct(*(F.col(c).alias(n) for c, n in zip(columns, names or columns))))


def _header_problem(files: DataFrame, names: list[str], text_schema: str, options: dict[str, str]) -> DataFrame:
    """``files`` plus ``header_problem``: NULL when a file's header (its line ``header_at``) names the
    fields in order (any case), else the one-line message naming the file."""
    header = F.try_element_at("lines", F.col("header_at").cast("int"))
    files = files.select("*", header.alias("header"), F.from_csv(header, text_schema, options).alias("parsed"))
    same = F.col(f"parsed.{_CORRUPT}").isNull()
    for name in names:
        same = same & (F.lower(F.col(f"parsed.{name}")) == name.lower())
    message = F.concat(F.lit("CSV file "), F.col("_metadata.file_path"), F.lit(" has the header '"), F.col("header"),
                       F.lit(f"', expected '{','.join(names)}': fix its first line"))
    problem = F.when(F.col("header").isNull() | same, F.lit(None).cast("string")).otherwise(message)
    return files.select("_metadata", "lines", "header_at", problem.alias("header_problem"))


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


class FilesSource(Source):
    """``files:///landing?format=json|csv|parquet`` (see the module docstring for every option)."""

    scheme = "files"
    summary = "JSON, CSV or Parquet files dropped into a landing directory"
    supports_max_events = False
    how_to_bound = "bound a files run with --trigger available-now"

    def __init__(self, uri: Uri):
        super().__init__(uri)
        if uri.host:
            raise ConfigError(f"{uri.display}: write files:///absolute/dir or files:relative/dir (no host part)")
        self.options: FilesOptions = parse_options(FilesOptions, snake_case_options(uri.options, "files://"), "files://")
        self.path = uri.local_path().resolve()
        o = self.options
        self.archive_dir: Path | None = None
        if o.clean_source == "archive":
            if not o.source_archive_dir:
                raise ConfigError("files:// clean_source=archive needs source_archive_dir=/dir/for/processed/files")
            self.archive_dir = Path(o.source_archive_dir).expanduser().resolve()
            if _inside(self.archive_dir, self.path) or _inside(self.path, self.archive_dir):
                raise ConfigError(f"files:// source_archive_dir {self.archive_dir} must lie outside the landing directory "
                                  f"{self.path} (and not contain it): choose e.g. {self.path.parent / 'archive'}")
        elif o.source_archive_dir:
            raise ConfigError("files:// source_archive_dir is used only with clean_source=archive: add it or drop the directory")

    def shared_paths(self) -> dict[str, Path]:
        return {"the landing directory": self.path}

    def describe(self) -> str:
        kind = {"json": "JSON lines", "text": "text lines", "csv": "CSV", "parquet": "parquet"}[self.options.format]
        cleaning = {"archive": f", processed files moved to {self.archive_dir}", "delete": ", processed files deleted"}
        return f"files:{self.path} ({kind}{cleaning.get(self.options.clean_source, '')})"

    def check(self) -> None:
        if not self.path.is_dir():
            raise SourceError(f"landing directory {self.path} does not exist: create it (mkdir -p) or fix the path")

    def check_plan(self, outputs: list[str]) -> None:
        if self.options.clean_source != "off" and len(outputs) > 1:
            raise ConfigError(f"files:// clean_source={self.options.clean_source} with {len(outputs)} outputs: each output "
                              "reads the landing directory itself, and the first to finish a file would remove it "
                              "from under the others: select one output, or drop clean_source")

    # --- reading ---------------------------------------------------------------------------------

    def _spark_options(self) -> dict[str, Any]:
        o = self.options
        options: dict[str, Any] = {}
        if o.max_files_per_trigger:
            options["maxFilesPerTrigger"] = o.max_files_per_trigger
        if o.latest_first:
            options["latestFirst"] = "true"
        if o.clean_source != "off":
            options["cleanSource"] = o.clean_source
        if self.archive_dir is not None:
            options["sourceArchiveDir"] = str(self.archive_dir)
        return options

    def _load(self, spark: SparkSession, streaming: bool) -> DataFrame:
        reader = spark.readStream.options(**self._spark_options()) if streaming else spark.read
        by_format = {"json": self._json_lines, "text": self._json_lines, "csv": self._csv_rows, "parquet": self._parquet_rows}
        rows = by_format[self.options.format]
        return rows(spark, reader).select(
            "value",
            F.lit(None).cast("string").alias("key"),
            "offset",
            F.col("_metadata.file_modification_time").alias("ingest_time"),
        )

    def _json_lines(self, spark: SparkSession, reader: Any) -> DataFrame:
        # One row per file (wholetext), split into numbered lines; blank lines are skipped.
        files = reader.format("text").option("wholetext", "true").load(str(self.path))
        lines = files.select("_metadata", F.posexplode(F.split("value", r"\r?\n")).alias("pos", "value"))
        return lines.where(F.trim("value") != "").select(
            "value", "_metadata", F.concat_ws(":", "_metadata.file_path", (F.col("pos") + 1).cast("string")).alias("offset"))

    def _fields(self) -> tuple[EventField, ...]:
        """The event schema's fields, which CSV and parquet columns are read by."""
        if self.event_schema is None:
            raise ConfigError(f"files:// format={self.options.format} reads columns named after the job's event schema, "
                              "and this source serves none: open it through a run (plan_run sets it), or set its "
                              "event_schema (check_source_replay: schema=...)")
        return self.event_schema.fields

    def _csv_rows(self, spark: SparkSession, reader: Any) -> DataFrame:
        # Read like JSON lines (whole files, numbered lines), so every row's offset is its line;
        # Spark's CSV reader exposes no row position. Blank lines are skipped, as Spark's reader does.
        names = [f.name for f in self._fields()]
        text_schema = T.StructType([T.StructField(n, T.StringType()) for n in names + [_CORRUPT]]).simpleString()
        csv_options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
        files = reader.format("text").option("wholetext", "true").load(str(self.path))
        files = files.select("_metadata", F.split("value", r"\r?\n").alias("lines"))
        header_at = F.array_position(F.transform("lines", lambda text: F.trim(text) != ""), True)
        files = files.select("_metadata", "lines", header_at.alias("header_at"))
        files = _header_problem(files, names, text_schema, csv_options)
        lines = files.select("_metadata", "header_at", "header_problem", F.posexplode("lines").alias("pos", "line"))
        lines = lines.where((F.col("pos") + 1 > F.col("header_at")) & (F.trim("line") != ""))
        fields = F.from_csv(F.col("line"), text_schema, csv_options).alias("fields")
        rows = lines.select("_metadata", "pos", "line", "header_problem", fields)
        # A row with the wrong number of fields keeps its raw line.
        value = F.coalesce(F.col(f"fields.{_CORRUPT}"), _payload([f"fields.{n}" for n in names], names))
        value = F.when(F.col("header_problem").isNull(), value).otherwise(F.raise_error(F.col("header_problem")))
        offset = F.concat_ws(":", "_metadata.file_path", (F.col("pos") + 1).cast("string"))
        return rows.select(value.alias("value"), "_metadata", offset.alias("offset"))

    def _parquet_rows(self, spark: SparkSession, reader: Any) -> DataFrame:
        df = reader.format("parquet").schema(self._parquet_schema(spark)).load(str(self.path))
        offset = F.concat_ws(":", "_metadata.file_path", (F.col("_metadata.row_index") + 1).cast("string"))
        return df.select(_payload([f.name for f in self._fields()]).alias("value"), "_metadata", offset.alias("offset"))

    def _parquet_schema(self, spark: SparkSession) -> T.StructType:
        """The event fields with the column types of the oldest parquet file present, else the wire types."""
        wire = {f.name: SPARK_TYPES[f.kind] for f in self._fields()}
        files = sorted((p for p in self.path.rglob("*.parquet") if not p.name.startswith((".", "_"))),
                       key=lambda p: p.stat().st_mtime) if self.path.is_dir() else []
        found = {}
        if files:
            try:
                found = {f.name: f.dataType for f in spark.read.parquet(str(files[0])).schema}
            except Exception as exc:  # noqa: BLE001 — Spark's reason, in one line
                reason = next((ln.strip() for ln in str(getattr(exc, "desc", exc)).splitlines() if ln.strip()), "")
                raise SourceError(f"cannot read the parquet schema of {files[0]} ({reason[:200]}): write timestamps in "
                                  "ms or µs and plain types (string, number, timestamp)") from None
        return T.StructType([T.StructField(name, found.get(name, typ)) for name, typ in wire.items()])

    def read_stream(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        return self._load(spark, streaming=True)

    def read_batch(self, spark: SparkSession, max_events: int | None = None) -> DataFrame:
        df = self._load(spark, streaming=False)
        return df.limit(max_events) if max_events is not None else df
