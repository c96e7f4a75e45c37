"""What a micro-batch's checkpoint writes cost: Hadoop's FileSystem API (speedlayer's default) against its
FileContext (Spark's default), the whole fleet job from the CLI, start-up included.

    .venv/bin/python bench/checkpoint_writes.py --rounds 3 --out bench/results/checkpoint_writes.json
    .venv/bin/python bench/checkpoint_writes.py --micro --rounds 2

Each run is ``speedlayer run fleet`` in a fresh process on the generator's unpaced ``rows_per_batch``
source, in small batches (so that the per-batch costs show), windows and alerts into memory sinks,
bounded by ``--max-events``; the other side sets Spark's default back with ``--conf
spark.sql.streaming.checkpointFileManagerClass=...``. Without Hadoop's native library, FileContext's
rename runs ``readlink`` in a child process for each of its two paths. Reported: wall time per
micro-batch (the process's wall time over the batches both queries ran) and the process tree's CPU
seconds (``dedup_cost.measured_run``). The managers alternate within a round.

``--micro``: one stateful query alone (the rate source, a count per 1 s window and key, into Spark's
``noop`` sink, micro-batches back to back), 60 batches per manager in one local session, alternating;
the median of batches 20-60 of Spark's own durations: the whole trigger, ``walCommit`` (the offset
log) and ``commitOffsets`` (the commit log).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dedup_cost import measured_run
from speedlayer.runtime.session import CHECKPOINT_FILE_MANAGER

FILE_CONTEXT = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
MANAGERS = {"filesystem": CHECKPOINT_FILE_MANAGER, "filecontext": FILE_CONTEXT}


def run_one(manager: str, args: argparse.Namespace) -> dict:
    source = f"generator://?seed=7&rows_per_batch={args.rows_per_batch}&rate=20000&late=0&start=2025-01-01T00:00:00Z"
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as state:
        wall, cpu = measured_run(manager, [
            sys.executable, "-m", "speedlayer", "run", "fleet", "--source", source, "--max-events", str(args.events),
            "--sink", "windows=memory:w", "--sink", "alerts=memory:a", "--state-dir", state, "--no-live",
            "--conf", f"spark.sql.streaming.checkpointFileManagerClass={MANAGERS[manager]}"])
        batches = sum(q["batches"] for q in json.loads((Path(state) / "last-run.json").read_text())["queries"])
    return {"manager": manager, "wall_s": round(wall, 2), "batches": batches,
            "wall_ms_per_batch": round(1000 * wall / batches), "cpu_s": round(cpu, 1)}


def micro(rounds: int) -> list[dict]:
    from pyspark.sql import functions as F

    from speedlayer.testing import local_session

    spark, runs = local_session(), []
    for round_no in range(rounds):
        for manager, manager_class in MANAGERS.items():
            spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager_class)
            events = spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
            counts = (events.withWatermark("timestamp", "1 second")
                      .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 50).alias("key")).count())
            with tempfile.TemporaryDirectory() as checkpoint:
                query = counts.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
                while query.lastProgress is None or query.lastProgress["batchId"] < 60:
                    time.sleep(0.2)
                query.stop()
            took = [p["durationMs"] for p in query.recentProgress if p["batchId"] >= 20]
            runs.append({"round": round_no, "manager": manager, **{
                f"median_{k}_ms": statistics.median(d.get(k, 0) for d in took)
                for k in ("triggerExecution", "walCommit", "commitOffsets")}})
            print(json.dumps(runs[-1]), flush=True)
    spark.stop()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rows-per-batch", type=int, default=1_000)
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.micro:
        result = {"settings": vars(args), "runs": micro(args.rounds)}
    else:
        runs = []
        for round_no in range(args.rounds):
            for manager in MANAGERS:
                runs.append({"round": round_no, **run_one(manager, args)})
                print(json.dumps(runs[-1]), flush=True)
        medians = {m: {k: statistics.median(r[k] for r in runs if r["manager"] == m)
                       for k in ("wall_ms_per_batch", "cpu_s")} for m in MANAGERS}
        print(json.dumps({"medians": medians}))
        result = {"settings": vars(args), "runs": runs, "medians": medians}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
