"""``delta:///abs/dir`` or ``delta:rel/dir`` — a Delta Lake table, exactly once through Delta's idempotent writes.

Each micro-batch is appended in ``foreachBatch`` with Delta's ``txnAppId`` (``speedlayer.<job>.<output>``)
and ``txnVersion`` (the batch id): Delta records both in the same commit as the rows and skips a
write whose version it already holds for that app id, so a batch Spark replays after a crash is
not appended twice. A fresh run (a new checkpoint counts batches from 0 again) into a table that
holds this output's batches is refused, as the parquet sink refuses another run's directory.

Delta Lake's jar (``io.delta:delta-spark_<spark major.minor>_2.13``) and its SQL extension and
catalog (``delta_conf``) are added to the session by the run, like Kafka's connector; only a Spark
version that a Delta release is built for can write (``DELTA_RELEASES``), and another one is
refused before start with the versions that pair.

    --sink alerts=delta:///data/fleet/alerts
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.core.faults import reached
from speedlayer.core.modes import APPEND
from speedlayer.core.parallelism import machine_partitions
from speedlayer.core.tables import TableRef
from speedlayer.core.uris import Uri
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target, no_options

#: Spark major.minor -> the Delta Lake release whose jar Maven Central serves for it
DELTA_RELEASES = {"4.2": "4.4.0", "4.1": "4.0.0"}


def delta_package() -> str:
    """The Delta Lake jar for the PySpark in use, as Maven coordinates; a ConfigError where none pairs.

    >>> delta_package()  # doctest: +ELLIPSIS
    'io.delta:delta-spark_4.2_2.13:4.4.0'
    """
    import pyspark

    spark = ".".join(pyspark.__version__.split(".")[:2])
    release = DELTA_RELEASES.get(spark)
    if release is None:
        pairs = ", ".join(f"Spark {s} (Delta {d})" for s, d in sorted(DELTA_RELEASES.items()))
        raise ConfigError(f"no Delta Lake release is built for Spark {pyspark.__version__}: the delta: sink runs on "
                          f"{pairs}; write parquet: instead, or install a PySpark that pairs")
    return f"io.delta:delta-spark_{spark}_2.13:{release}"


def delta_conf() -> dict[str, str]:
    """What Delta's writes need in the session: its SQL extension and catalog (Delta refuses to write without
    them), and its table snapshots rebuilt in one task per core.

    Each idempotent append reads the table's transactions from a snapshot that Delta rebuilds, by default
    in 50 tasks: on a small machine that job costs more than the batch's own write.

    >>> delta_conf()["spark.sql.extensions"]
    'io.delta.sql.DeltaSparkSessionExtension'
    """
    return {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.databricks.delta.snapshotPartitions": str(machine_partitions())}


def app_id(job: str, output: str) -> str:
    """Delta's ``txnAppId`` of an output: what ties the table's commits to this output's batch ids.

    >>> app_id("fleet", "alerts")
    'speedlayer.fleet.alerts'
    """
    return f"speedlayer.{job}.{output}"


def committed_version(table: Path, app: str) -> int:
    """The last ``txnVersion`` (batch id) the table's log records for ``app``; -1 for none.

    Every append of ``app`` carries its transaction, and Delta keeps the newest commits as JSON files
    (a checkpoint only adds a summary beside them), so the newest one is found there.
    """
    log, needle = table / "_delta_log", f'"appId":"{app}"'
    versions = [json.loads(line)["txn"]["version"] for p in (log.glob("*.json") if log.is_dir() else [])
                for line in p.read_text(errors="replace").splitlines() if needle in line and '"txn"' in line]
    return max(versions, default=-1)


class DeltaSink(Sink):
    scheme = "delta"
    summary = "a Delta Lake table, appended once per micro-batch (txnAppId/txnVersion)"
    guarantee = EXACTLY_ONCE
    modes = (APPEND,)
    writes_batches = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        no_options(uri)
        self.path: Path = uri.local_path()
        self.package = delta_package()

    def spark_packages(self) -> list[str]:
        return [self.package]

    def spark_conf(self) -> dict[str, str]:
        return delta_conf()

    def shared_paths(self) -> dict[str, Path]:
        return {"the Delta table": self.path}

    def describe(self) -> str:
        return f"delta:{self.path}"

    def destination(self, job: str, output: str) -> tuple | None:
        return ("directory", str(self.path))

    def read_back(self) -> TableRef:
        return TableRef("delta", str(self.path.resolve()), packages=(self.package,), conf=delta_conf())

    def check(self, output_name: str, fresh_checkpoint: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise SinkError(f"{self.path} is a file: the delta sink needs a directory")

    def batch_function(self, schema: StructType, target: Target) -> DeltaAppend:
        app = app_id(target.job, target.output)
        if target.fresh_checkpoint and committed_version(self.path, app) >= 0:
            raise SinkError(f"{self.path} already holds batches of another run of {target.job}:{target.output} (Delta "
                            f"txnAppId {app}): write to another table, or pass that run's --state-dir to resume it")
        return DeltaAppend(str(self.path), app)


class DeltaAppend:
    """The ``foreachBatch`` function: one idempotent Delta append per micro-batch."""

    def __init__(self, path: str, app: str):
        self.path, self.app = path, app
        self._committed: int | None = None

    @property
    def what(self) -> str:
        return f"Delta table {self.path}"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        reached("planned", batch_id, self.what)
        if self._committed is None:
            self._committed = committed_version(Path(self.path), self.app)
        if batch_id <= self._committed:
            # Delta would skip it without computing it; a stateful query's state stores commit only when
            # every partition of the batch is computed, so run it through, writing nothing.
            batch_df.write.format("noop").mode("overwrite").save()
        else:
            (batch_df.write.format("delta").mode("append")
             .option("txnAppId", self.app).option("txnVersion", batch_id).save(self.path))
            self._committed = batch_id
        reached("written", batch_id, self.what)
