"""Shared test helpers: batch recomputation of a bounded generator run."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.runtime.build import build_output
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings


def batch_output(spark, settings: RunSettings, output: str) -> DataFrame:
    """The same job function over the same events, as a static DataFrame."""
    return build_output(spark, plan_run(settings.model_copy(update={"sinks": {output: "memory:x"}})), output, batch=True)


def assert_refused_for_its_state_layout(spark, settings: RunSettings, output: str) -> None:
    """A run of ``settings`` stops with one line that names ``output``'s checkpoint, whose state is in another
    layout, and says how to start afresh (not Spark's schema or operator error)."""
    import pytest

    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.run import Run

    with pytest.raises(QueryFailedError) as failed:
        Run(spark, plan_run(settings)).start_and_wait()
    message = str(failed.value)
    assert "\n" not in message and "was written in another layout" in message
    assert str(Path(settings.state_dir) / "checkpoints" / output) in message and "--state-dir" in message


def closed_windows(windows: DataFrame, watermark) -> DataFrame:
    """Windows that a stream in append mode has emitted once the watermark reached ``watermark``."""
    return windows.where(F.col("window_end") <= F.lit(watermark).cast("timestamp"))


def wait_for_batch(query, batch_id: int, timeout: float = 120.0) -> None:
    """Block until ``query`` has completed micro-batch ``batch_id`` (an unbounded source never idles)."""
    import time

    deadline = time.monotonic() + timeout
    while (query.lastProgress is None or query.lastProgress["batchId"] < batch_id):
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            raise TimeoutError(f"query {query.name} did not reach batch {batch_id} in {timeout}s")
        query.awaitTermination(0.1)


def land_files(landing: Path, files: list[list[str]], first_mtime: datetime, first: int = 0) -> None:
    """Write each list of lines as one JSON-lines file, modified one second apart from ``first_mtime``,
    so a files source with ``max_files_per_trigger=1`` reads them one per micro-batch in order.

    File ``i`` of the list is ``f<first + i>.jsonl``, modified at ``first_mtime + first + i`` s: files
    landed later (``first`` > 0) go on the same sequence. Each is written under a hidden name and
    renamed into place, so a running query never reads half a file.
    """
    landing.mkdir(parents=True, exist_ok=True)
    for i, lines in enumerate(files, start=first):
        path, hidden = landing / f"f{i}.jsonl", landing / f".f{i}.jsonl.tmp"
        hidden.write_text("\n".join(lines) + "\n")
        stamp = first_mtime.timestamp() + i
        os.utime(hidden, (stamp, stamp))
        hidden.rename(path)


def run_recording(spark, plan, output: str, checkpoint: Path, seen: dict, attempt: int, fail_batch: int | None) -> None:
    """Run ``output`` of ``plan`` to the end of its input (availableNow), recording each batch's sorted
    rows in ``seen[(attempt, batch_id)]``; batch ``fail_batch`` fails after it is written, before it commits."""
    def record(batch, batch_id):
        seen[(attempt, batch_id)] = sorted(tuple(r) for r in batch.collect())
        if batch_id == fail_batch:
            raise RuntimeError("the sink failed after writing the batch")

    query = (build_output(spark, plan, output).writeStream.foreachBatch(record)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    except Exception:  # noqa: BLE001 — the injected failure
        assert fail_batch is not None


def committed_parquet(directory: Path) -> list[Path]:
    """The files Spark's file sink committed, from its own log (``_spark_metadata``), read without Spark."""
    files = []
    for entry in sorted((directory / "_spark_metadata").glob("[0-9]*"), key=lambda p: int(p.name.split(".")[0])):
        for line in entry.read_text().splitlines()[1:]:
            files.append(Path(json.loads(line)["path"].removeprefix("file:")))
    return files
