"""``check_sink_idempotent``: a sink holds each row as its output mode says, and a replayed batch changes nothing.

The check streams the given micro-batches into the sink the way ``Run`` starts a query (the sink's
``check``, ``records`` and ``start``, trigger available-now, one batch per file), reads back what
the destination holds, then does what a crash between the sink's write and Spark's commit leaves
behind: it removes the last batch's entry from the checkpoint's commit log and restarts the query,
so Spark writes that batch id again. The sink must then hold:

- the rows the mode gives (append: every row of every batch; update: the latest row of each key),
  or ``expected`` for a sink with a layout of its own;
- after the replay, the same rows if it declares exactly-once; an at-least-once sink may hold
  duplicates (the report says how many) but must have lost nothing.

>>> check_sink_idempotent(spark, postgres_url + "?table=kit_alerts", [batch0, batch1], key=["event_id"])  # doctest: +SKIP
SinkReport(sink='postgresql://...', guarantee='exactly-once', mode='append', batches=2, rows=40, duplicates=0, notes=())
"""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.errors import PySparkAssertionError
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError, QueryFailedError, SpeedlayerError
from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.runtime.stopping import first_line
from speedlayer.sinks import open_sink
from speedlayer.sinks.base import EXACTLY_ONCE, Sink, Target
from speedlayer.testing.errors import CheckFailed, SinkContentMismatch, SinkNotIdempotent, shown_diff
from speedlayer.testing.landing import first_mtime, land_frames
from speedlayer.testing.progress import ran
from speedlayer.testing.readback import Reader, sink_reader


@dataclass(frozen=True)
class SinkReport:
    """What was checked: the sink, its declared guarantee, the mode, the batches, the rows it holds
    after them, and the rows the replay added (0 unless the sink is at-least-once)."""

    sink: str
    guarantee: str
    mode: str
    batches: int
    rows: int
    duplicates: int
    notes: tuple[str, ...] = ()


def check_sink_idempotent(spark: SparkSession, sink: str | Sink, batches: DataFrame | Sequence[DataFrame],
                          key: Sequence[str], *, mode: str | None = None, read_back: Reader | None = None,
                          expected: DataFrame | None = None, output: str = "kit_rows", job: str = "kit",
                          rtol: float = 1e-9) -> SinkReport:
    """Write ``batches`` (static DataFrames, one per micro-batch) to ``sink`` in ``mode``, replay the last one, and
    raise ``SinkContentMismatch`` or ``SinkNotIdempotent`` where the sink breaks its word.

    ``sink``: a URI (opened anew for the restart) or a Sink object. The destination must be new
    (a unique table, key prefix or directory). ``key``: the columns that identify a row. ``mode``:
    append or update, one the sink declares (default its first). ``read_back()``: what the
    destination holds, as a DataFrame like the batches (built in for parquet, PostgreSQL, MySQL
    and Redis). ``output``/``job``: the names the sink derives default tables and keys from.

    >>> check_sink_idempotent(spark, f"parquet://{tmp}/out", [rows], key=["event_id"]).duplicates  # doctest: +SKIP
    0
    """
    frames = [batches] if isinstance(batches, DataFrame) else list(batches)
    opened = open_sink(sink) if isinstance(sink, str) else sink
    mode = _mode(opened, mode)
    _check_keys(frames, list(key), mode)
    target = Target(job, output, f"{job}_{output}_{uuid.uuid4().hex[:8]}", mode=mode, key=tuple(key))
    reader = read_back or sink_reader(spark, opened, target, frames[0].schema)
    want = expected if expected is not None else _expected(frames, list(key), mode)
    with tempfile.TemporaryDirectory(prefix="speedlayer-sink-check-") as tmp:
        landing, checkpoint = Path(tmp) / "landing", Path(tmp) / "checkpoint"
        land_frames(landing, frames, first_mtime(None))
        stream = spark.readStream.schema(frames[0].schema).option("maxFilesPerTrigger", 1).parquet(str(landing))
        _write(spark, opened, stream, checkpoint, target, fresh=True)
        before = reader().localCheckpoint()
        _check_content(opened, mode, before, want, rtol)
        last = len(frames) - 1
        _forget_commit(checkpoint, last)
        again = open_sink(sink) if isinstance(sink, str) else opened
        progress = _write(spark, again, stream, checkpoint, target, fresh=False)
        if not any(p["batchId"] == last for p in ran(progress)):
            raise CheckFailed(f"the restarted query did not run batch {last} again, so the replay was not checked")
        after = reader().localCheckpoint()
    duplicates, notes = _check_replay(opened, mode, last, before, after, rtol)
    return SinkReport(opened.describe(), opened.guarantee, mode, len(frames), before.count(), duplicates, notes)


def _mode(sink: Sink, mode: str | None) -> str:
    checkable = [m for m in sink.modes if m in (APPEND, UPDATE)]
    chosen = mode or (checkable[0] if checkable else None)
    if chosen is None:
        raise ConfigError(f"sink {sink.scheme}: takes {', '.join(sink.modes)} mode only; the check writes append or update")
    if chosen not in sink.modes:
        raise ConfigError(f"sink {sink.scheme}: declares {', '.join(sink.modes)} mode, not {chosen}: check one of those")
    if chosen not in (APPEND, UPDATE):
        raise ConfigError(f"{chosen} mode needs an aggregation, which the check does not run: check append or update")
    return chosen


def _check_keys(frames: list[DataFrame], key: list[str], mode: str) -> None:
    """Append mode writes each key once; update mode at most once per batch (else the latest is ambiguous)."""
    missing = [k for k in key if k not in frames[0].columns]
    if not key or missing:
        raise ConfigError(f"key must name columns of the batches ({', '.join(frames[0].columns)}): "
                          f"{missing[0] if missing else 'none given'}")
    groups = [_union(frames)] if mode == APPEND else frames
    for number, frame in enumerate(groups):
        twice = frame.groupBy(*key).count().where("count > 1").limit(1).collect()
        if twice:
            where = "across the batches" if mode == APPEND else f"in batch {number}"
            raise ConfigError(f"key {tuple(twice[0])[:-1]} appears {twice[0]['count']} times {where}: in {mode} mode "
                              f"give each key {'once' if mode == APPEND else 'at most once per batch'}")


def _union(frames: list[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _expected(frames: list[DataFrame], key: list[str], mode: str) -> DataFrame:
    if mode == APPEND:
        return _union(frames)
    numbered = _union([f.withColumn("__batch", F.lit(i)) for i, f in enumerate(frames)])
    newest = Window.partitionBy(*key).orderBy(F.col("__batch").desc())
    return numbered.withColumn("__n", F.row_number().over(newest)).where("__n = 1").drop("__n", "__batch")


def _write(spark: SparkSession, sink: Sink, stream: DataFrame, checkpoint: Path, target: Target, fresh: bool) -> list:
    """Run one available-now query of ``stream`` into ``sink``; its progress reports."""
    sink.check(target.output, fresh)
    sink.check_session(spark)
    target = dataclasses.replace(target, fresh_checkpoint=fresh)
    df = sink.records(stream, target)
    writer = (df.writeStream.queryName(target.query_name).outputMode(target.mode)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    try:
        query = sink.start(writer, df, target)
        query.awaitTermination()
    except SpeedlayerError:
        raise
    except Exception as exc:  # noqa: BLE001 — the sink failed: one line
        raise QueryFailedError(f"sink {sink.describe()} failed: {first_line(exc)}") from None
    return query.recentProgress


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """Leave the checkpoint as a crash after the sink's write and before Spark's commit would."""
    commits = checkpoint / "commits"
    entry = commits / str(batch)
    if not entry.is_file():
        raise CheckFailed(f"batch {batch} was never committed (no {entry}): the sink did not finish the batches")
    entry.unlink()
    (commits / f".{batch}.crc").unlink(missing_ok=True)


def _check_content(sink: Sink, mode: str, held: DataFrame, want: DataFrame, rtol: float) -> None:
    exact = sink.guarantee == EXACTLY_ONCE
    try:
        assertDataFrameEqual(held if exact else held.distinct(), want if exact else want.distinct(), rtol=rtol)
    except PySparkAssertionError as exc:
        raise SinkContentMismatch(f"sink {sink.describe()} ({mode} mode) holds other rows than the batches written: "
                                  f"{shown_diff(exc)}\n{_mode_hint(mode)}") from None


def _check_replay(sink: Sink, mode: str, batch: int, before: DataFrame, after: DataFrame,
                  rtol: float) -> tuple[int, tuple[str, ...]]:
    lost, added = before.exceptAll(after).count(), after.exceptAll(before).count()
    if sink.guarantee == EXACTLY_ONCE:
        try:
            assertDataFrameEqual(after, before, rtol=rtol)
        except PySparkAssertionError as exc:
            raise SinkNotIdempotent(
                f"sink {sink.describe()} declares exactly-once, but writing batch {batch} again (as Spark does after a "
                f"crash before its commit) changed what it holds: {added} row(s) more, {lost} fewer\n{shown_diff(exc)}\n"
                "Make its writes idempotent: upsert by the output's key, or record the batch id with the data and "
                "skip a batch already written") from None
        return 0, ()
    if lost:
        raise SinkContentMismatch(f"sink {sink.describe()} lost {lost} row(s) when batch {batch} was written again: "
                                  "even an at-least-once sink must keep every row it was given")
    return added, (f"the sink declares {sink.guarantee}: writing batch {batch} again added {added} duplicate row(s), "
                   "which that guarantee allows",)


def _mode_hint(mode: str) -> str:
    if mode == UPDATE:
        return "In update mode a later batch's row replaces the stored row of its key; pass expected= for another layout."
    return "In append mode every row of every batch is kept once; pass expected= for a sink with its own layout."
