"""``console:`` (or ``console:?rows=20``) — each batch as a readable table in the terminal.

Micro-batch queries render through ``display`` (a rich table by default; the live view replaces it
to show the latest rows in place). Continuous queries cannot run Python per batch, so there the
sink falls back to Spark's own console sink.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery
from pyspark.sql.types import StructType
from rich.console import Console
from rich.table import Table

from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, COMPLETE, UPDATE
from speedlayer.core.spark_errors import raise_if_interrupted
from speedlayer.core.uris import Uri
from speedlayer.sinks.base import AT_LEAST_ONCE, Sink, Target, no_options


@dataclass(frozen=True)
class BatchView:
    """The rows of one batch that a console shows (the first ``rows``, newest first)."""

    job: str
    output: str
    batch_id: int
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total: int


def render_table(view: BatchView) -> Table:
    """A rich table of a batch."""
    title = f"{view.job} · {view.output} · batch {view.batch_id} · {view.total} row{'s' if view.total != 1 else ''}"
    table = Table(title=title, title_justify="left", expand=False)
    for column in view.columns:
        table.add_column(column, overflow="fold")
    for row in view.rows:
        table.add_row(*(_cell(v) for v in row))
    return table


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"  # speeds keep their one decimal, coordinates their metres
    if hasattr(value, "strftime"):
        return value.strftime("%H:%M:%S.%f")[:-3] if getattr(value, "microsecond", 0) else value.strftime("%H:%M:%S")
    return "" if value is None else str(value)


def print_view(view: BatchView) -> None:
    Console().print(render_table(view))


class ConsoleSink(Sink):
    scheme = "console"
    summary = "each micro-batch printed on the terminal"
    guarantee = AT_LEAST_ONCE
    modes = (APPEND, UPDATE, COMPLETE)
    supports_continuous = True
    supports_realtime = True
    writes_batches = True
    shows_batches = True

    def __init__(self, uri: Uri):
        super().__init__(uri)
        no_options(uri, ("rows",))
        try:
            self.rows = int(uri.options.get("rows", 20))
        except ValueError:
            raise ConfigError(f"console: option 'rows' must be a whole number (got {uri.options['rows']!r})") from None
        self.display: Callable[[BatchView], None] = print_view

    def batch_function(self, schema: StructType, target: Target) -> Callable[[DataFrame, int], None]:
        def show(batch: DataFrame, batch_id: int) -> None:
            self.display(newest_rows(batch, batch_id, target.job, target.output, self.rows))

        return show

    def start(self, writer: DataStreamWriter, df: DataFrame, target: Target) -> StreamingQuery:
        if target.jvm_only:
            return writer.format("console").option("numRows", self.rows).option("truncate", "false").start()
        return super().start(writer, df, target)


def newest_rows(batch: DataFrame, batch_id: int, job: str, output: str, rows: int) -> BatchView:
    """The newest ``rows`` of a micro-batch (by its last timestamp column) and its row count, in one
    Spark job. Used by the console sink and the dashboard's feed."""
    time_cols = [f.name for f in batch.schema.fields if f.dataType.typeName() == "timestamp"]
    # counted first, then ordered: a sort with a limit is one top-N pass, where a sort under the
    # count's window would sample its input first, running the batch's whole plan twice
    counted = batch.select("*", F.count(F.lit(1)).over(Window.partitionBy()).alias("__total"))
    counted = counted.orderBy(F.col(time_cols[-1]).desc()) if time_cols else counted
    try:
        found = counted.limit(rows).collect()
    except Exception as exc:
        raise_if_interrupted(exc)
        raise
    total = found[0]["__total"] if found else 0
    columns = batch.columns
    return BatchView(job, output, batch_id, columns, [tuple(r[c] for c in columns) for r in found], total)
