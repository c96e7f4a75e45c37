"""``ScriptedStream``: feed a job's stream one micro-batch at a time and see what each step did.

Each ``step(events)`` lands the events as one JSON-lines file and lets the running query process
everything available (``processAllAvailable``): the step's micro-batch, and the no-data batch
Spark runs after it when the watermark moved and the query keeps state (that batch closes
windows). The step then tells what the output emitted, the watermark before and after, the
events Spark's late filter saw behind the watermark, how many rows Spark dropped as late, and the
step's dead letters: what a memory sink or ``TwsTester`` do not show. No sleeps: a step returns
when Spark has nothing left to do.

>>> with ScriptedStream(spark, "fleet", "windows", watermark="5s") as stream:  # doctest: +SKIP
...     first = stream.step([ping("a", 0), ping("b", 20)])
...     second = stream.step([ping("c", 3)])
>>> [(r.window_start, r.events) for r in first.emitted], first.watermark        # doctest: +SKIP
([(datetime(2026, 11, 22, 10, 0), 1)], datetime(2026, 11, 22, 10, 0, 15, tzinfo=timezone.utc))
>>> [r.event_id for r in second.late], second.dropped, second.emitted           # doctest: +SKIP
(['c'], 1, [])
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError, QueryFailedError, SpeedlayerError
from speedlayer.pipelines.base import Job
from speedlayer.runtime.run import Run
from speedlayer.runtime.stopping import first_line
from speedlayer.sources import open_source
from speedlayer.testing.landing import first_mtime, land_events
from speedlayer.testing.planning import check_outputs, plan_collected, resolve_job
from speedlayer.testing.progress import dropped_by_watermark, ran

#: processAllAvailable calls a step makes before it gives up on Spark taking in its file
MAX_ROUNDS = 5


@dataclass(frozen=True)
class Step:
    """What one step did. Rows are as ``collect()`` gives them, sorted; watermarks in UTC (None: none yet)."""

    number: int
    #: the micro-batches it ran: its data batch, then a no-data batch when the watermark moved
    batch_ids: tuple[int, ...]
    #: the rows the output emitted in those batches
    emitted: list[Row]
    #: the watermark before the step: Spark's late filter drops events at or behind it
    watermark_before: datetime | None
    #: the watermark Spark's last batch of the step ran with
    watermark: datetime | None
    #: the step's events at or behind ``watermark_before`` (an operator keyed by event time drops
    #: them all; a window aggregation only those whose window had closed: see ``dropped``)
    late: list[Row]
    #: rows Spark counted as dropped by the watermark (``numRowsDroppedByWatermark``)
    dropped: int
    #: the step's payloads that failed to decode, with the reason
    dead_letters: list[Row]

    def __str__(self) -> str:
        batches = ", ".join(map(str, self.batch_ids)) or "none"
        return (f"step {self.number} (batches {batches}): {len(self.emitted)} row(s) emitted, watermark "
                f"{_show(self.watermark_before)} -> {_show(self.watermark)}, {len(self.late)} late, "
                f"{self.dropped} dropped by Spark, {len(self.dead_letters)} dead letter(s)")


class ScriptedStream:
    """One output of ``job`` as a running stream fed by ``step(events)``; use it as a context manager.

    ``mode``: the output mode (default the output's own); ``ingest_time``: the first step's file
    time (default now; each step one second later), which ``files://`` reports as ingest time;
    ``settings``: run settings such as ``watermark="5s"``.
    """

    def __init__(self, spark: SparkSession, job: Job | str, output: str, *, mode: str | None = None,
                 ingest_time: datetime | None = None, **settings: Any):
        self.spark, self.job = spark, resolve_job(job)
        self.output = check_outputs(self.job, [output], 1)[0]
        self._modes = {output: mode} if mode else {}
        self._mtime, self._settings = first_mtime(ingest_time), settings
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._run: Run | None = None
        self.steps: list[Step] = []

    def start(self) -> ScriptedStream:
        self._tmp = tempfile.TemporaryDirectory(prefix="speedlayer-script-")
        self._landing = Path(self._tmp.name) / "landing"
        self._landing.mkdir()
        plan, sinks = plan_collected(self.job, f"files://{self._landing}?format=json", [self.output],
                                     Path(self._tmp.name) / "state", "processing:0s", self._modes, self._settings)
        self._sink, self._run = sinks[self.output], Run(self.spark, plan)
        try:
            self._run.start()
        except BaseException:
            self._tmp.cleanup()
            raise
        self._query = self._run.queries[0]
        return self

    def step(self, events: Sequence[Any]) -> Step:
        """Feed ``events`` (dicts or JSON strings) as one micro-batch; return what the step did."""
        if self._run is None:
            raise ConfigError("the scripted stream is not running: use it as 'with ScriptedStream(...) as stream:'")
        number, before = len(self.steps), max(self._sink.batches, default=-1)
        watermark_before = self._watermark()
        path = land_events(self._landing, events, number, self._mtime + number)
        self._process(number)
        ids = tuple(sorted(b for b in self._sink.batches if b > before))
        progress = [p for p in ran(self._query.recentProgress) if p["batchId"] in ids]
        decoded = self._run.plan.job.decode(open_source(f"files://{path}?format=json").read_batch(self.spark))
        late = self._behind(decoded.events, watermark_before)
        step = Step(number, ids, _sorted(self._sink.rows(self.spark, ids)), watermark_before, self._watermark(), late,
                    dropped_by_watermark(progress), _sorted(decoded.dead_letters.collect()))
        self.steps.append(step)
        return step

    def _process(self, number: int) -> None:
        """Let the query run until it has read the step's file and has nothing left to do."""
        for _ in range(MAX_ROUNDS):
            try:
                self._query.processAllAvailable()
            except Exception as exc:  # noqa: BLE001 — the job failed: say why in one line
                raise QueryFailedError(f"the scripted stream of {self.job.name}/{self.output} failed in step {number}: "
                                       f"{first_line(exc)}") from None
            if self._files_batches() > number:
                return
        raise QueryFailedError(f"step {number}: Spark did not take in the step's file after {MAX_ROUNDS} rounds")

    def _files_batches(self) -> int:
        """How many batches of new files the query has taken (the file source's ``logOffset`` + 1)."""
        last = self._query.lastProgress
        end = (last or {}).get("sources", [{}])[0].get("endOffset") if last else None
        end = json.loads(end) if isinstance(end, str) else end
        return int(end["logOffset"]) + 1 if isinstance(end, dict) and "logOffset" in end else 0

    def _watermark(self) -> datetime | None:
        """The watermark the query's last batch ran with (None before the first one)."""
        last = (ran(self._query.recentProgress) or [{}])[-1]
        text = (last.get("eventTime") or {}).get("watermark")
        moment = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
        return moment if moment is not None and moment.timestamp() > 0 else None

    def _behind(self, events, watermark: datetime | None) -> list[Row]:
        column = self._run.plan.job.schema.time_field
        if watermark is None or column not in events.columns:
            return []
        return _sorted(events.where(F.col(column) <= F.lit(watermark)).collect())

    def stop(self) -> None:
        """Stop the query after its batch and remove the landing and state directories."""
        if self._run is not None:
            run, self._run = self._run, None
            try:
                run.stop_requested.set()
                run.wait()
            finally:
                run.cleanup()
                self._tmp.cleanup()

    def __enter__(self) -> ScriptedStream:
        return self.start()

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self.stop()
        except SpeedlayerError:
            if exc_type is None:  # a failed step already said why: keep its error
                raise


def _show(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if moment else "none"


def _sorted(rows: list[Row]) -> list[Row]:
    """Rows in a stable order (nulls last in each column); as they came when a column is not orderable."""
    try:
        return sorted(rows, key=lambda row: tuple((v is None, v if v is not None else 0) for v in row))
    except TypeError:
        return rows
