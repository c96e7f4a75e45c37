"""A test double of a sink: every micro-batch a query gives it, kept on the driver by batch id.

The helpers plan a run with a ``CollectSink`` for each output (it takes every mode): the run is
planned, checked and wired by the same planner and ``Run`` as on the command line, and its
rows come back as Arrow tables (timestamps exact), one per batch id. A batch Spark writes again
replaces its first delivery, as an exactly-once sink would keep it.

>>> sink = CollectSink()
>>> sink.guarantee, sink.modes
('exactly-once', ('append', 'update', 'complete'))
>>> Run(spark, plan_run(settings, sinks={"alerts": sink})).start_and_wait(); sink.frame(spark)  # doctest: +SKIP
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.uris import parse_uri
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target

_ORDER = "__speedlayer_batch"


class CollectSink(Sink):
    """Keeps each micro-batch as an Arrow table (``batches``); ``frame`` gives what the output holds."""

    scheme = "collect"
    guarantee = EXACTLY_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    writes_batches = True

    def __init__(self) -> None:
        super().__init__(parse_uri("collect:", "sink URI"))
        self.batches: dict[int, pa.Table] = {}
        self.schema: T.StructType | None = None
        self.mode, self.key = APPEND, ()

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        self.schema, self.mode, self.key = df.schema, target.mode, tuple(target.key)
        return writer.foreachBatch(self._keep).start()

    def _keep(self, batch: DataFrame, batch_id: int) -> None:
        self.batches[batch_id] = batch.toArrow()

    def rows(self, spark: SparkSession, batch_ids) -> list[Row]:
        """The rows of these batches, as ``collect()`` gives them."""
        tables = [self.batches[b] for b in sorted(batch_ids) if b in self.batches]
        return self._frame(spark, tables).collect() if tables else []

    def frame(self, spark: SparkSession) -> DataFrame:
        """What the output holds after every batch: append mode every row, complete mode the last
        batch, update mode the latest row of each key."""
        tables = [t for _, t in sorted(self.batches.items())]
        if self.mode == COMPLETE:
            tables = tables[-1:]
        if self.mode != UPDATE or not tables:
            return self._frame(spark, tables)
        if not self.key:
            raise ConfigError("an output written in update mode needs key columns to tell which row replaces which: "
                              "declare Output(key=...) or compare it in append or complete mode")
        numbered = [t.append_column(_ORDER, pa.array([i] * t.num_rows, pa.int64())) for i, t in enumerate(tables)]
        schema = T.StructType([*self.schema.fields, T.StructField(_ORDER, T.LongType())])
        rows = spark.createDataFrame(_one_chunk(numbered), schema=schema)
        newest = Window.partitionBy(*self.key).orderBy(F.col(_ORDER).desc())
        latest = rows.withColumn("__n", F.row_number().over(newest)).where("__n = 1")
        return latest.select(*self.schema.fieldNames())

    def _frame(self, spark: SparkSession, tables: list[pa.Table]) -> DataFrame:
        if not tables:
            return spark.createDataFrame([], self.schema)
        return spark.createDataFrame(_one_chunk(tables), schema=self.schema)


def _one_chunk(tables: list[pa.Table]) -> pa.Table:
    """The tables as one, in a single chunk: PySpark 4.3's ``createDataFrame`` loses every row of a
    table whose columns start with two empty chunks (empty micro-batches)."""
    return pa.concat_tables(tables, promote_options="default").combine_chunks()
