"""Reference tables: the static side of a stream-static join (customer tiers, card profiles, rates).

A stream joins a static DataFrame in micro-batch mode like any DataFrame: each micro-batch's rows
are joined with the table, broadcast when it is small (``F.broadcast``), and a left join keeps the
events the table does not know. What Spark does not settle is *when* the table is read. A plain
``spark.read`` is read again at every micro-batch, from the files it listed when the query was
planned: a file rewritten in place shows its new rows (cut at its old length), a file added to
the directory is not seen until a restart. So a table comes in one of two forms:

- pinned (``refresh=False``, the default): read once, when the pipeline is built, and its rows kept
  in the query plan: every batch, and a replay of it, joins the same rows; Spark ships them to
  the executors inside the plan. At most ``MAX_PINNED_ROWS`` rows.
- refreshed (``refresh=True``): Spark's own reading, again at every micro-batch, as above.

>>> tiers = reference_table(spark, "ref/customers.csv")                    # doctest: +SKIP
>>> orders.join(F.broadcast(tiers), "customer", "left")                    # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from speedlayer.core.errors import ConfigError
from speedlayer.core.spark_errors import quiet_analysis_errors, spark_reason
from speedlayer.core.tables import TableRef

#: the formats Spark reads without a package of its own, by the name a file ends with
FORMATS = {"csv": ".csv", "json": ".json", "parquet": ".parquet", "orc": ".orc", "text": ".txt"}
#: other endings taken for a format
ALSO = {".jsonl": "json", ".ndjson": "json", ".tsv": "csv"}
#: the options a format gets unless given: a CSV's first line names its columns, whose types are inferred
DEFAULT_OPTIONS = {"csv": {"header": "true", "inferSchema": "true"}}
#: the most rows a pinned table holds: its rows travel in the query plan, through the driver
MAX_PINNED_ROWS = 1_000_000


def format_of(path: str) -> str | None:
    """The format a table's path names by its ending, or None (a directory, another ending).

    >>> format_of("ref/customers.csv"), format_of("s3a://bucket/rates.parquet"), format_of("ref/tiers")
    ('csv', 'parquet', None)
    """
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    found = [fmt for fmt, ending in FORMATS.items() if name.endswith(ending)]
    return found[0] if found else next((fmt for ending, fmt in ALSO.items() if name.endswith(ending)), None)


def is_local(path: str) -> bool:
    """Whether ``path`` is on the driver's own disk (no scheme, or ``file:``), which a cluster must share.

    >>> is_local("ref/customers.csv"), is_local("file:///ref/x.csv"), is_local("hdfs://nn/ref/x.csv")
    (True, True, False)
    """
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> Path:
    """The file a local path or ``file:`` URI names, ``~`` expanded.

    >>> local_path("file:///ref/x.csv"), local_path("ref/x.csv")
    (PosixPath('/ref/x.csv'), PosixPath('ref/x.csv'))
    """
    return Path(path.removeprefix("file://").removeprefix("file:")).expanduser()


def shared_dir(path: str) -> Path | None:
    """The local directory a cluster's executors read a table at ``path`` from (a file's own directory),
    for ``Job.shared_paths``; None for a URI every machine reads (``hdfs://``, ``s3a://``).

    >>> shared_dir("/ref/customers.csv"), shared_dir("s3a://bucket/customers.csv")
    (PosixPath('/ref'), None)
    """
    if not is_local(path):
        return None
    local = local_path(path).resolve()
    return local if local.is_dir() else local.parent


def reference_table(spark: SparkSession, path: str | Path, format: str | None = None,
                    options: Mapping[str, object] | None = None, schema: str | None = None,
                    refresh: bool = False, name: str | None = None) -> DataFrame:
    """The table at ``path`` (a file, a directory of files, or a URI Spark reads: ``hdfs://``, ``s3a://``),
    pinned at its rows of now, or read again at every micro-batch with ``refresh=True``.

    ``format`` defaults to the one the path's ending names; ``options`` are Spark's reader options
    (a CSV gets ``header`` and ``inferSchema`` unless given); ``schema`` a DDL string
    (``"customer STRING, tier STRING"``) instead of inference. A missing path, an unknown format or
    a table Spark cannot read is a ConfigError in one line, naming ``name`` (default: the path).

    >>> reference_table(spark, "ref/customers.csv").columns                      # doctest: +SKIP
    ['customer', 'tier']
    """
    what = name or f"reference table {path}"
    ref = table_ref(path, format, options, schema, what)
    if is_local(ref.path) and not local_path(ref.path).exists():
        raise ConfigError(f"{what}: {ref.path} does not exist: check the path (a relative one is taken from "
                          f"{Path.cwd()})")
    with quiet_analysis_errors():
        try:
            table = ref.read(spark)
            return table if refresh else _pinned(spark, table, what)
        except (AnalysisException, ValueError) as exc:  # ParseException (a bad schema) is one too
            raise ConfigError(f"{what}: Spark cannot read it as {ref.format}: {spark_reason(exc)}: fix the path, "
                              "format, options or schema") from None


def table_ref(path: str | Path, format: str | None = None, options: Mapping[str, object] | None = None,
              schema: str | None = None, what: str | None = None) -> TableRef:
    """How ``reference_table`` reads the table at ``path``: its format (by default the one the path's
    ending names, an unknown one a ConfigError naming ``what``), Spark's reader options with a CSV's
    defaults, and the schema.

    >>> table_ref("ref/customers.csv").options
    {'header': 'true', 'inferSchema': 'true'}
    """
    path = str(path)
    fmt = format or format_of(path)
    if fmt not in FORMATS:
        given = f"format {fmt!r}" if fmt else "no format, and its name does not end with one"
        raise ConfigError(f"{what or f'reference table {path}'}: {given}: give one of {', '.join(FORMATS)}")
    given = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
    defaults = {k: v for k, v in DEFAULT_OPTIONS.get(fmt, {}).items() if not (schema and k == "inferSchema")}
    return TableRef(fmt, path, {**defaults, **given}, schema)


def _pinned(spark: SparkSession, table: DataFrame, what: str) -> DataFrame:
    """``table``'s rows of now, as a DataFrame that holds them (a local relation in the plan)."""
    rows = table.limit(MAX_PINNED_ROWS + 1).toArrow()
    if rows.num_rows > MAX_PINNED_ROWS:
        raise ConfigError(f"{what} has more than {MAX_PINNED_ROWS:,} rows, too many to keep in the query plan: "
                          "read it at every batch instead (refresh)")
    return spark.createDataFrame(rows) if rows.num_rows else spark.createDataFrame([], table.schema)
