"""What a micro-batch of speedlayer's Kafka alerts does beyond plain PySpark's, part by part.

The fleet alerts Kafka -> Kafka at ``processing:0s`` (``bench/kafka_latency.py``'s cells: latency as a
Kafka consumer measures it), four sides in one session, in turn, each round in the other order:

- ``speedlayer``: the run as ``speedlayer run`` starts it (``--dedup fast``);
- ``speedlayer, no observation``: the same run without decode's per-batch observation (the counts
  and latency percentiles ``/metrics`` and the dashboard read), turned off in this process only;
- ``plain``: the query written by hand with the same checks (``kafka_latency.plain_alerts``);
- ``plain + observation``: the same, with speedlayer's observation attached to its parsed rows.

Per cell: p50 / p99 since ingest, the medians of Spark's per-batch durations (trigger, addBatch,
queryPlanning) and the CPU the session's JVM used per second of the cell.

    .venv/bin/python bench/micro_batch_cost.py                       # 1,000/s, 2 rounds
    .venv/bin/python bench/micro_batch_cost.py --rate 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "peers"))

import kafka_latency  # noqa: E402
from speedlayer.bench.kafka_latency import measure_cell, speedlayer_alerts, warm_up_session  # noqa: E402

MODE = "processing:0s"


def without_observation(start):
    """``start`` building its run without decode's observation (in this process only)."""
    import speedlayer.runtime.build as build

    def started(source: str, out: str):
        saved, build.OBSERVATION = build.OBSERVATION, None
        try:
            return start(source, out)
        finally:
            build.OBSERVATION = saved
    return started


def probed(spark, start, into: dict):
    """``start`` with, when its cell stops it, the query's median batch durations and the JVM's CPU per second."""
    jvm = psutil.Process(spark._jvm.java.lang.ProcessHandle.current().pid())

    def cpu_s() -> float:
        times = jvm.cpu_times()
        return times.user + times.system

    def started(source: str, out: str):
        stop = start(source, out)
        cpu0, t0 = cpu_s(), time.monotonic()

        def stopped() -> None:
            into["jvm_cores"] = round((cpu_s() - cpu0) / (time.monotonic() - t0), 3)
            batches = [p for q in spark.streams.active for p in q.recentProgress if p["numInputRows"] > 0]
            for phase in ("triggerExecution", "addBatch", "queryPlanning"):
                into[f"{phase}_ms"] = statistics.median(p["durationMs"][phase] for p in batches) if batches else None
            into["batches"] = len(batches)
            stop()
        return stopped
    return started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--measure", type=float, default=40.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "micro_batch_cost.json")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        bootstrap, scratch, spark = kafka_latency.broker_and_session(stack, None, "speedlayer-micro-batch-cost-")
        state = str(scratch)
        sides = {
            "speedlayer": speedlayer_alerts(spark, bootstrap, MODE, state, dedup="fast"),
            "speedlayer, no observation": without_observation(speedlayer_alerts(spark, bootstrap, MODE, state, dedup="fast")),
            "plain": kafka_latency.plain_alerts(spark, bootstrap, MODE, state, checks=True),
            "plain + observation": kafka_latency.plain_alerts(spark, bootstrap, MODE, state, checks=True, observed=True),
        }
        started = time.monotonic()
        for start in sides.values():
            warm_up_session(bootstrap, MODE, args.rate, start, seconds=20)
        cells = []
        for round_ in range(1, args.rounds + 1):
            for side in (list(sides) if round_ % 2 else list(reversed(sides))):
                probe: dict = {}
                cell = measure_cell(bootstrap, side, MODE, args.rate, probed(spark, sides[side], probe),
                                    args.warmup, args.measure)
                cells.append({"round": round_, "side": side, "p50_ms": cell.p50_ms, "p99_ms": cell.p99_ms,
                              "measured": cell.measured, **probe})
                print(f"round {round_}: {side}: p50 {cell.p50_ms} ms, p99 {cell.p99_ms} ms; {probe}", flush=True)
        medians = {side: {key: statistics.median(c[key] for c in cells if c["side"] == side and c[key] is not None)
                          for key in ("p50_ms", "p99_ms", "triggerExecution_ms", "addBatch_ms", "queryPlanning_ms",
                                      "jvm_cores")}
                   for side in sides}
        for side, figures in medians.items():
            print(f"{side}: medians {figures}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "benchmark": "micro_batch_cost", "command": " ".join(["bench/micro_batch_cost.py", *(argv or sys.argv[1:])]),
            "rate": args.rate, "mode": MODE, "warmup_s": args.warmup, "measure_s": args.measure,
            "elapsed_s": round(time.monotonic() - started), "medians": medians, "cells": cells}, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
