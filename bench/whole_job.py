"""The fleet job's outputs, each alone and several together: events/s per configuration.

    .venv/bin/python bench/whole_job.py                          # each output alone, then all seven
    .venv/bin/python bench/whole_job.py --configs incidents --layouts separate
    .venv/bin/python bench/whole_job.py --configs windows+alerts+dead-letters --layouts separate,one

A configuration is a set of outputs (``+`` between them). Each runs in a fresh process on the
generator's ``rate-micro-batch`` feed (``--rows-per-batch`` events a batch, 1% duplicates, 0.5%
late, 0.2% malformed) with one of these layouts:

- ``separate``: every output is its own query, as ``speedlayer run`` starts them today
  (``build_output``), each reading and decoding the source itself, writing to Spark's ``noop``;
- ``one``: one query, as ``speedlayer run --one-query`` builds it (``speedlayer.runtime.shared``):
  each output's rows are packed in a struct column of their own, the outputs are unioned, and one
  ``foreachBatch`` keeps the batch (``persist``) and writes each output's rows to ``noop``. Each
  branch plans its own shuffles (Spark's reuse of a shuffle across branches is off for it).
- ``one-reused``: as ``one`` with Spark's reuse of shuffles on: the branches share the read, decode
  and the shuffle before the dedup (``ReusedExchange``). Measured only: a branch that reads
  another's shuffle loses sight of the watermark below it (its state is never evicted, its
  timers never fire), so speedlayer does not run this.
- ``one-shuffled``: as ``one-reused``, with the raw rows shuffled once right after the read, so
  that late events' branch reads that shuffle instead of the source (dead letters still read
  again: their branch prunes other columns before the shuffle, so Spark does not reuse it).
- ``plain``: the baseline, ``bench/plain_fleet.py``'s hand-written windows job (configuration
  ``windows`` only).

A configuration's events/s is the events of the measured batches (after ``--warmup``) over the
time from the moment every query had finished its warm-up to the moment every query had finished
its measured batches. Results go to ``--out`` as JSON.
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

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results" / "whole_job.json"
ALL = ("windows", "sliding", "alerts", "dead-letters", "incidents", "trips", "late")
START = "2025-01-01T00:00:00Z"


def generator_uri(rows: int) -> str:
    return (f"generator://?seed=7&rows_per_batch={rows}&rate=5000&late=0.005&malformed=0.002"
            f"&duplicates=0.01&start={START}")


def start_queries(spark, plan, layout: str, outputs: list[str], tmp: Path) -> list:

    from speedlayer.runtime.build import build_output

    if layout == "plain":  # the baseline: bench/plain_fleet.py's hand-written windows job on the same feed
        from plain_fleet import plain_windows

        return [plain_windows(plan.source.read_stream(spark)).writeStream.queryName("plain").format("noop")
                .option("checkpointLocation", str(tmp / "cp" / "plain")).start()]
    if layout == "separate":
        return [build_output(spark, plan, o).writeStream.queryName(o).format("noop")
                .option("checkpointLocation", str(tmp / "cp" / o)).start() for o in outputs]
    from speedlayer.runtime.shared import SHARED_QUERY_CONF, FanOut, pack_outputs, session_conf

    raw = plan.source.read_stream(spark)
    if layout == "one-shuffled":  # branches that leave before the dedup's shuffle read this one
        raw = raw.repartition(spark.sparkContext.defaultParallelism)
    decoded = plan.job.decode(raw)
    frames = plan.job.pipeline(decoded.events, plan.params)
    packed = {o: (decoded.dead_letters if o == "dead-letters" else frames[o]) for o in outputs}

    def to_noop(batch, batch_id: int) -> None:
        batch.write.format("noop").mode("overwrite").save()

    writer = (pack_outputs(packed).writeStream.queryName("all").foreachBatch(FanOut(dict.fromkeys(packed, to_noop)))
              .option("checkpointLocation", str(tmp / "cp" / "all")))
    if layout in ("one-reused", "one-shuffled"):  # Spark's reuse of shuffles across branches (which hides the watermark)
        return [writer.start()]
    with session_conf(spark, SHARED_QUERY_CONF):
        return [writer.start()]


def measure(layout: str, outputs: list[str], rows: int, batches: int, warmup: int) -> dict:
    """One configuration in this process: its events/s and each query's median batch time."""
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.session import build_session
    from speedlayer.runtime.settings import RunSettings

    tmp = Path(tempfile.mkdtemp(prefix="whole-job-"))
    spark = build_session("local[*]", {"spark.ui.enabled": "false"}, app_name="whole-job", log_file=tmp / "spark.log")
    sinks = {o: f"memory:t_{o.replace('-', '_')}" for o in outputs}  # planned only: the queries write to noop
    plan = plan_run(RunSettings(job="fleet", source=generator_uri(rows), sinks=sinks, state_dir=str(tmp / "state")))
    queries = start_queries(spark, plan, layout, outputs, tmp)
    began = None
    while True:
        failed = [q for q in queries if q.exception() is not None]
        if failed:
            raise SystemExit(f"query {failed[0].name} failed: {failed[0].exception()}")
        done = min(len(q.recentProgress) for q in queries)
        if began is None and done >= warmup:
            began = time.perf_counter()
        if done >= warmup + batches:
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - began
    batch_ms = {q.name: statistics.median(p["durationMs"]["triggerExecution"]
                                          for p in q.recentProgress[warmup:warmup + batches]) for q in queries}
    # how often a batch reads the source: one scan node per read, in every query's last plan
    scans = sum(q._jsq.streamingQuery().lastExecution().executedPlan().toString().count("MicroBatchScan")
                for q in queries)
    for q in queries:
        q.stop()
    spark.stop()
    return {"layout": layout, "outputs": outputs, "events_per_s": rows * batches / elapsed,
            "elapsed_s": elapsed, "median_batch_ms": batch_ms, "source_reads_per_batch": scans}


def run_config(layout: str, config: str, rows: int, batches: int, warmup: int) -> dict:
    """One configuration (outputs joined by ``+``) in a fresh process: ``measure``'s result.

    >>> run_config("plain", "windows", 20_000, 3, 1)["events_per_s"]  # doctest: +SKIP
    """
    cmd = [sys.executable, __file__, "--child", layout, config, "--rows-per-batch", str(rows),
           "--batches", str(batches), "--warmup", str(warmup)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{config} ({layout}) failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default=",".join([*ALL, "+".join(ALL)]),
                   help="comma-separated configurations, each one output or several joined by + (default: each "
                        "output alone, then all seven together)")
    p.add_argument("--layouts", default="separate", help="separate, one, one-reused, one-shuffled, plain (comma-separated)")
    p.add_argument("--rows-per-batch", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=4, help="measured micro-batches (default 4)")
    p.add_argument("--warmup", type=int, default=2, help="micro-batches before measuring (default 2)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--child", nargs=2, metavar=("LAYOUT", "OUTPUTS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        layout, outputs = args.child
        print(json.dumps(measure(layout, outputs.split("+"), args.rows_per_batch, args.batches, args.warmup)))
        return
    results = []
    for config in args.configs.split(","):
        for layout in args.layouts.split(","):
            if (layout.startswith("one") and "+" not in config) or (layout == "plain" and config != "windows"):
                continue
            result = run_config(layout, config, args.rows_per_batch, args.batches, args.warmup)
            results.append(result)
            print(f"{layout:<9} {config:<60} {result['events_per_s']:>10,.0f} events/s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["bench/whole_job.py", *sys.argv[1:]])
    args.out.write_text(json.dumps({"benchmark": "whole_job", "command": command, "rows_per_batch": args.rows_per_batch,
                                    "batches": args.batches, "warmup": args.warmup, "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
