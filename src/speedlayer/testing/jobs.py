"""``assert_stream_equals_batch``: a job's stream gives the same rows as its batch run on the same events.

The events land as JSON-lines files in a temporary directory, one file per micro-batch. The stream
is a ``files://`` run planned by ``plan_run`` and started by ``Run``, as ``speedlayer run`` does
(trigger available-now, one file per micro-batch, each output into a ``CollectSink``); the batch
is ``build_output(..., batch=True)`` over the same directory. Every selected output must agree
(``pyspark.testing.assertDataFrameEqual``, any row order):

- in append mode, an output that keeps state emits a row only once the watermark has passed it,
  so the batch rows are first cut to those the stream closed under its final watermark: by
  default ``window_end <= watermark`` for outputs with a ``window_end`` column, else the rule
  given in ``closed``;
- in update mode the latest row of each key counts, in complete mode the last batch.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkAssertionError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.modes import APPEND
from speedlayer.pipelines.base import Job, Output
from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import RunPlan
from speedlayer.runtime.run import Run
from speedlayer.testing.errors import NothingCompared, StreamBatchMismatch, shown_diff
from speedlayer.testing.landing import first_mtime, land_events, split_batches
from speedlayer.testing.planning import check_outputs, default_outputs, plan_collected, resolve_job

#: ``closed[output](batch_rows, watermark)``: the rows an append-mode stream has emitted by that watermark
ClosedRule = Callable[[DataFrame, Column], DataFrame]


@dataclass(frozen=True)
class Compared:
    """One output compared: its mode, the rows both runs gave, the batch rows the stream had not
    closed yet (left out), and the stream's final watermark."""

    output: str
    mode: str
    rows: int
    held_back: int
    watermark: str | None


def assert_stream_equals_batch(spark: SparkSession, job: Job | str, events: Sequence[Any],
                               outputs: Sequence[str] | None = None, *, modes: Mapping[str, str] | None = None,
                               closed: Mapping[str, ClosedRule] | None = None, ingest_time: datetime | None = None,
                               rtol: float = 1e-9, **settings: Any) -> dict[str, Compared]:
    """Run ``job`` on ``events`` as a stream and as a batch; raise ``StreamBatchMismatch`` where an output differs.

    ``events``: dicts or JSON strings (one micro-batch), or a list of such lists (one micro-batch
    each). ``outputs``: default the job's default outputs. ``modes``: output mode per output
    (default: the output's own). ``ingest_time``: the landing files' modification time (default
    now), which ``files://`` gives as ingest time: an event more than ``--max-ahead`` after it is
    a dead letter. ``settings``: run settings such as ``watermark="5s"`` or ``window="10s"``.

    >>> assert_stream_equals_batch(spark, "fleet", [[ping("a", 0), ping("b", 20)], [ping("c", 40)]],
    ...                            ["windows", "alerts"], watermark="5s")  # doctest: +SKIP
    {'windows': Compared(output='windows', mode='append', rows=2, held_back=1, ...), 'alerts': ...}
    """
    job = resolve_job(job)
    batches = split_batches(events)
    chosen = check_outputs(job, outputs if outputs is not None else default_outputs(job), len(batches))
    with tempfile.TemporaryDirectory(prefix="speedlayer-test-") as tmp:
        landing, mtime = Path(tmp) / "landing", first_mtime(ingest_time)
        for number, batch in enumerate(batches):
            land_events(landing, batch, number, mtime + number)
        plan, sinks = plan_collected(job, f"files://{landing}?format=json&max_files_per_trigger=1", chosen,
                                     Path(tmp) / "state", "available-now", modes, settings)
        run = Run(spark, plan)
        summary = run.start_and_wait()
        watermarks = {q.output: q.watermark for q in summary.queries}
        report = {name: _compare(spark, plan, run.outputs[name], sinks[name].frame(spark), watermarks.get(name),
                                 closed or {}, rtol)
                  for name in chosen}
    if all(c.rows == 0 and c.held_back == 0 for c in report.values()):
        raise NothingCompared(f"every output ({', '.join(chosen)}) was empty in both runs, so nothing was compared: "
                              "check that the events decode (they may all be dead letters: add 'dead-letters' to the "
                              "outputs to see them) and that they reach these outputs")
    return report


def _compare(spark: SparkSession, plan: RunPlan, output: Output, streamed: DataFrame, watermark: str | None,
             closed: Mapping[str, ClosedRule], rtol: float) -> Compared:
    name = output.name
    query = next(q for q in plan.queries if q.output.name == name)
    batch = build_output(spark, plan, name, batch=True).localCheckpoint()  # computed once, counted and compared
    rule = closed.get(name) or _default_rule(output.stateful, query.mode, batch)
    total = batch.count()
    expected = batch if rule is None else rule(batch, F.lit(watermark).cast("timestamp")).localCheckpoint()
    kept = expected.count()
    if total and not kept:
        raise NothingCompared(f"output {name!r}: the stream's final watermark ({watermark}) closed none of the {total} "
                              "rows of the batch run, so nothing was compared: add a later event (one past the last "
                              "window by more than the watermark delay), or split the events into more batches")
    try:
        assertDataFrameEqual(streamed, expected, rtol=rtol)
    except PySparkAssertionError as exc:
        raise StreamBatchMismatch(_mismatch(name, query.mode, exc, rule is None and output.stateful)) from None
    return Compared(name, query.mode, kept, total - kept, watermark)


def _default_rule(stateful: bool, mode: str, batch: DataFrame) -> ClosedRule | None:
    if not stateful or mode != APPEND or "window_end" not in batch.columns:
        return None
    return lambda rows, watermark: rows.where(F.col("window_end") <= watermark)


def _mismatch(name: str, mode: str, exc: Exception, unclosed: bool) -> str:
    shown = shown_diff(exc)
    hint = ("An output differs between a stream and a batch when it reads the clock (current_timestamp, now), draws "
            "random numbers (rand, uuid), numbers rows (monotonically_increasing_id) or depends on how events are cut "
            "into micro-batches: compute it from the events alone.")
    if unclosed and mode == APPEND:
        hint += (f" Output {name!r} keeps state in append mode: if the stream only lacks rows it had not closed yet, "
                 f"pass closed={{{name!r}: lambda rows, watermark: rows.where(<closed by watermark>)}}.")
    return f"output {name!r} ({mode} mode): the stream gave other rows than the batch run of the same events\n{shown}\n{hint}"
