"""The dashboard's tap: one extra, light query that shows what the outputs' sinks cannot.

The outputs' own queries may write to files or databases, which the dashboard cannot read back
cheaply. The tap reads the same source through the job's own decoder and passes each micro-batch
of events (a static DataFrame, in ``foreachBatch``) through the job as its run computes it
(``runtime.build.batch_outputs``: the job's pipeline and per-batch steps), then collects

- the latest position of each entity, for a job that declares them (``Job.positions``: the fleet's map), and
- the newest rows of the job's stateless outputs (alerts, wordcount's batch counts) not already
  shown by a console sink.

It has its own checkpoint (``<state-dir>/dashboard-checkpoint``), reads at most what the run
reads (``--max-events``), a batch at most what the run's queries read in as many of their batches
as fit in one of its own (``Source.view_stream``: at the run's per-batch cap, it would fall further
behind at each), and is stopped with the run. Stateful outputs (windows) are shown only when a
console sink writes them: recomputing them here would double the job's work.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from speedlayer.core.errors import SpeedlayerError
from speedlayer.monitor.feed import ResultsFeed
from speedlayer.runtime.build import batch_outputs
from speedlayer.runtime.shared import main_readers
from speedlayer.runtime.sql_endpoint import DASHBOARD_POOL, SCHEDULER_POOL
from speedlayer.runtime.triggers import Trigger
from speedlayer.sinks.console import newest_rows

if TYPE_CHECKING:
    from speedlayer.runtime.run import Run

log = logging.getLogger("speedlayer.monitor")

#: rows of each tapped output kept per batch
TAP_ROWS = 30
#: the tap's batches start at most this often: a map and feeds redrawn every few seconds are enough, and
#: each batch's fixed cost (planning, a job, checkpoint writes) is CPU the outputs' own queries need
TAP_EVERY_MS = 5_000


def tapped_outputs(run: Run, feed: ResultsFeed) -> list[str]:
    """Stateless outputs of the job's main stream that no console sink shows (not one whose plan is yet to tell)."""
    return [name for name, out in run.plan.job.outputs.items()
            if out.stateful is False and not out.inputs and name != "dead-letters" and name not in feed.fed_by_sink]


def start_tap(run: Run, feed: ResultsFeed, every_ms: int = TAP_EVERY_MS) -> Any | None:
    """Start the tap query (micro-batch runs only); in a run that goes on until stopped, a batch every
    ``every_ms`` at most (the run's interval when longer); None with a logged reason when it cannot run."""
    plan = run.plan
    if plan.trigger.continuous or plan.trigger.realtime:
        return None
    try:
        plan.source.check_plan(main_readers(plan.queries) + ["dashboard"])
    except SpeedlayerError as exc:
        log.warning("speedlayer: the dashboard shows no map or feeds: %s", exc)
        return None
    schema, positions = plan.job.schema, plan.job.positions
    outputs = tapped_outputs(run, feed)
    if positions is None and not outputs:
        return None
    time_field = schema.time_field
    extra = [f.name for f in schema.fields if f.name not in (*(positions.fields if positions else ()), time_field)
             and f.kind == "double"]

    def collect(batch, batch_id: int) -> None:
        try:
            show(batch, batch_id)
        except Exception as exc:  # noqa: BLE001 — the tap skips a batch rather than fail (or stop the run)
            if not run.stop_requested.is_set() and "InterruptedException" not in str(exc):
                log.warning("speedlayer: the dashboard's tap skipped batch %s: %s", batch_id, " ".join(str(exc).split())[:300])

    reused = positions is not None and bool(outputs)  # a batch read by more than one Spark job

    def show(events, batch_id: int) -> None:
        if reused:
            events.persist()
        try:
            if positions is not None:
                where = (F.col(positions.lat).alias("lat"), F.col(positions.lon).alias("lon"))
                latest = F.max_by(F.struct(*where, *extra, time_field), time_field).alias("p")
                rows = events.groupBy(positions.key).agg(latest).select(positions.key, "p.*").collect()
                feed.set_positions(batch_id, [r.asDict() for r in rows], positions.key)
            for name, frame in batch_outputs(plan, events, outputs, batch_id).items():
                feed.show_batch(newest_rows(frame, batch_id, plan.job.name, name, TAP_ROWS))
        finally:
            if reused:
                events.unpersist()

    trigger = plan.trigger  # a run bounded by --max-events keeps its pace: its page ends with its last events
    if trigger.kind == "processing" and plan.settings.max_events is None and trigger.interval_ms < every_ms:
        trigger = Trigger("processing", every_ms)
    # the run's batches in one of the tap's, counting a back-to-back batch as a second at the least
    batches = max(1, -(-trigger.interval_ms // max(plan.trigger.interval_ms, 1000))) if trigger.kind == "processing" else 1
    # decoded in the stream: the decoder's DataFrames are built once, not again in each batch's function
    events = plan.job.decode(plan.source.view_stream(run.spark, plan.settings.max_events, batches)).events
    writer = (events.writeStream
              .queryName(f"{plan.job.name}_dashboard")
              .option("checkpointLocation", str(plan.state_dir / "dashboard-checkpoint")))
    context = run.spark.sparkContext
    pool = context.getLocalProperty(SCHEDULER_POOL)
    context.setLocalProperty(SCHEDULER_POOL, DASHBOARD_POOL)
    try:
        return trigger.apply(writer).foreachBatch(collect).start()
    finally:
        context.setLocalProperty(SCHEDULER_POOL, pool)
