"""What a deterministic dedup costs the whole fleet job: ``--dedup fast`` against ``--dedup exact``.

    .venv/bin/python bench/dedup_cost.py --rounds 3 --events 1000000
    .venv/bin/python bench/dedup_cost.py --modes fast,exact,state --rounds 1 --events 200000

Each run is ``speedlayer run fleet`` in a fresh process (start-up included) on the generator's
unpaced ``rows_per_batch`` source, the default outputs (windows and alerts, one query each) into
memory sinks, bounded by ``--max-events``. Throughput = events / the process's wall time; the CPU
seconds of the process tree (Python, JVM, Python workers) are sampled too, as other processes on
the machine disturb them much less. Modes alternate within a round.

- ``fast``: ``dropDuplicatesWithinWatermark`` alone (keeps the copy it meets first).
- ``exact``: partition by key, each key's copies put in offset order by ``mapInArrow``
  (``speedlayer.pipelines.dedup``), then ``dropDuplicatesWithinWatermark``.
- ``state``: the candidate that was measured and not taken: a Python ``transformWithState``
  (Row API, event-time mode) keyed by ``event_id`` that emits the lowest-offset copy unless the key
  was seen, with a timer at event time + watermark that forgets it (defined here only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
START = "2025-01-01T00:00:00Z"


def _patch_state_dedup() -> None:
    """Make ``--dedup exact`` run the transformWithState candidate (child process only)."""
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    from speedlayer.core.offsets import offset_rank
    from speedlayer.pipelines import dedup

    class LowestOffsetOnce(StatefulProcessor):
        def __init__(self, hold_ms: int, fields: list[str]):
            self.hold_ms, self.fields = hold_ms, fields

        def init(self, handle) -> None:
            self.handle = handle
            self.seen = handle.getValueState("seen", T.StructType([T.StructField("expires_ms", T.LongType())]))

        def handleInputRows(self, key, rows, timerValues):
            best = min(rows, key=lambda r: offset_rank(r.offset))
            if self.seen.exists():
                return iter([])
            expires = best._ms + self.hold_ms
            self.seen.update((expires,))
            self.handle.registerTimer(expires)
            return iter([Row(**{f: best[f] for f in self.fields})])

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            self.seen.clear()
            return iter([])

    def state_stream(events, params, key):
        time_col = next(f.name for f in events.schema.fields if "spark.watermarkDelayMs" in f.metadata)
        out = T.StructType([f for f in events.schema.fields if f.name != "offset"])
        rows = events.withColumn("_ms", F.unix_millis(time_col))
        return rows.groupBy(key).transformWithState(
            LowestOffsetOnce(params.watermark_ms, out.fieldNames()), out, "Append", "EventTime",
            eventTimeColumnName=time_col)

    dedup._exact_stream = state_stream


def child(mode: str, events: int, rows_per_batch: int) -> None:
    if mode == "state":
        _patch_state_dedup()
    from speedlayer.cli.app import app

    source = (f"generator://?seed=7&rows_per_batch={rows_per_batch}&rate=20000&late=0&malformed=0"
              f"&duplicates=0.01&start={START}")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        sys.argv = ["speedlayer", "run", "fleet", "--source", source, "--max-events", str(events),
                    "--dedup", "fast" if mode == "fast" else "exact", "--sink", "windows=memory:w",
                    "--sink", "alerts=memory:a", "--state-dir", tmp, "--no-live", "--no-dashboard"]
        app()


def tree_cpu_s(proc: psutil.Process, seen: dict[int, float]) -> None:
    """Record the CPU seconds (user + system, with reaped children) of ``proc`` and its descendants."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            t = p.cpu_times()
            seen[p.pid] = max(seen.get(p.pid, 0.0), t.user + t.system + t.children_user + t.children_system)
        except psutil.Error:
            pass


def measured_run(label: str, command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run ``command`` to its end: its wall seconds, and the CPU seconds its process tree (Python, JVM,
    Python workers) used, sampled every 0.2 s, which other processes on the machine disturb much less
    than the wall time. A failed run ends the benchmark with the tail of its output."""
    started, cpu = time.monotonic(), {}
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        proc = psutil.Process(child.pid)
        while child.poll() is None:
            tree_cpu_s(proc, cpu)
            time.sleep(0.2)
        wall = time.monotonic() - started
        if child.returncode != 0:
            log.seek(0)
            raise SystemExit(f"{label} failed:\n{log.read()[-3000:]}")
    return wall, sum(cpu.values())


def run_one(mode: str, args: argparse.Namespace) -> dict:
    """One child run in ``mode``: its wall time and its process tree's CPU."""
    import os

    wall, cpu = measured_run(mode, [sys.executable, __file__, "--child", mode, "--events", str(args.events),
                                    "--rows-per-batch", str(args.rows_per_batch)],
                             env={"PYTHONPATH": str(ROOT / "src"), **_env()})
    return {"mode": mode, "wall_s": round(wall, 2), "events_per_s": round(args.events / wall),
            "cpu_s": round(cpu, 1), "load_1min_after": round(os.getloadavg()[0], 2)}


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="fast,exact")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rows-per-batch", type=int, default=100_000)
    parser.add_argument("--child")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.events, args.rows_per_batch)
    runs = []
    for round_no in range(args.rounds):
        for mode in args.modes.split(","):
            runs.append({"round": round_no, **run_one(mode, args)})
            print(json.dumps(runs[-1]), flush=True)
    summary = {m: {k: statistics.median(r[k] for r in runs if r["mode"] == m) for k in ("events_per_s", "cpu_s")}
               for m in args.modes.split(",")}
    print(json.dumps({"medians": summary}))
    if args.out:
        Path(args.out).write_text(json.dumps({"settings": vars(args), "runs": runs, "medians": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
