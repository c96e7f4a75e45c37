"""The fleet job's outputs, each alone and several together: events/s per configuration.

    .venv/bin/python bench/whole_job.py                          # each output alone, then all seven
    .venv/bin/python bench/whole_job.py --configs incidents --layouts separate
    .venv/bin/python bench/whole_job.py --configs windows+alerts+dead-letters --layouts separate,one
    .venv/bin/python bench/whole_job.py --check                  # plain PySpark's seven equal speedlayer's?

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
- ``plain``: the baseline, ``bench/plain_fleet.py``'s hand-written outputs (``plain_outputs``), one
  query per output, each reading the source itself, writing to ``noop``, like ``separate``.

``--check`` runs speedlayer's outputs (a query each, ``build_output``) and the plain ones over the
same bounded stream (the same micro-batches of a small generator feed, where every output has rows
within a few batches) and says, per output, whether their rows are equal.

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
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results" / "whole_job.json"
ALL = ("windows", "sliding", "alerts", "dead-letters", "incidents", "trips", "late")
START = "2025-01-01T00:00:00Z"


def generator_uri(rows: int) -> str:
    return (f"generator://?seed=7&rows_per_batch={rows}&rate=5000&late=0.005&malformed=0.002"
            f"&duplicates=0.01&start={START}")


def plain_settings(plan):
    """The run's settings as the plain job takes them (written out, as a user would)."""
    from plain_fleet import PlainSettings
    from speedlayer.pipelines.fleet.options import fleet_options

    p, o = plan.params, fleet_options(plan.params)
    return PlainSettings(watermark_ms=p.watermark_ms, window_ms=p.window_ms, sliding_ms=p.sliding_window_ms,
                         slide_ms=p.slide_ms, trip_gap_ms=o.trip_gap_ms, max_trip_ms=o.max_trip_ms,
                         incident_after_ms=o.incident_after_ms, incident_timeout_ms=o.incident_timeout_ms)


def start_queries(spark, plan, layout: str, outputs: list[str], tmp: Path) -> list:

    from speedlayer.runtime.build import build_output

    if layout == "plain":  # the baseline: bench/plain_fleet.py's hand-written outputs, a query each, on the same feed
        from plain_fleet import plain_outputs

        settings = plain_settings(plan)
        return [plain_outputs(plan.source.read_stream(spark), settings, [o])[o].writeStream.queryName(f"plain_{o}")
                .format("noop").option("checkpointLocation", str(tmp / "cp" / f"plain_{o}")).start() for o in outputs]
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


#: the check's feed: slow event time (10 events/s, 20 vehicles) and more late, re-sent and malformed
#: events than the benchmark's, so that every output has rows within a few small batches
CHECK_URI = ("generator://?seed=7&rows_per_batch={rows}&rate=10&vehicles=20&late=0.05&malformed=0.02"
             f"&duplicates=0.05&start={START}")
#: and shorter trips and incidents than the defaults (5 min gap, 1 h cut, 10 s above the limit)
CHECK_OPTIONS = {"trip_gap": "10s", "max_trip": "30s", "incident_after": "2s"}


def _collecting(df, name: str, batches: int, store: dict, checkpoint: Path):
    """A query keeping the rows of ``df``'s first ``batches`` micro-batches in ``store[name]``."""
    store[name] = []

    def keep(batch, batch_id: int) -> None:
        if batch_id < batches:
            store[name].extend(batch.collect())
        else:  # every batch must be computed whole, or Spark refuses to commit its state
            batch.write.format("noop").mode("overwrite").save()

    return df.writeStream.queryName(checkpoint.name.replace("-", "_")).foreachBatch(keep).option(
        "checkpointLocation", str(checkpoint)).start()


def _compare(ours: list, theirs: list) -> str | None:
    """None when the rows are equal in any order (floating point within assertDataFrameEqual's tolerance), else why not."""
    from pyspark.testing import assertDataFrameEqual

    try:
        assertDataFrameEqual(theirs, ours, checkRowOrder=False)
    except AssertionError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else "differ"
    return None


def check_outputs(spark, outputs: list[str], rows: int, batches: int, tmp: Path, feed: str = "check") -> dict:
    """Speedlayer's outputs and the plain ones over the same ``batches`` micro-batches of ``rows`` events:
    by output, (speedlayer's row count, plain's, None if equal else why not).

    Dead letters are compared without ``reason``: plain PySpark's reasons are its own words.

    >>> check_outputs(spark, ["windows"], 400, 3, tmp)  # doctest: +SKIP
    {'windows': (96, 96, None)}
    """
    from pyspark.sql import Row

    from plain_fleet import plain_outputs
    from speedlayer.runtime.build import build_output
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.settings import RunSettings
    from speedlayer.runtime.stopping import stop_after_batch

    uri, options = (CHECK_URI.format(rows=rows), CHECK_OPTIONS) if feed == "check" else (generator_uri(rows), {})
    sinks = {o: f"memory:c_{o.replace('-', '_')}" for o in outputs}
    # bounded, so that the batches after the compared ones are empty and quick to stop
    plan = plan_run(RunSettings(job="fleet", source=uri, sinks=sinks, state_dir=str(tmp / "state"), options=options,
                                max_events=rows * batches))
    settings = plain_settings(plan)
    ours: dict[str, list] = {}
    theirs: dict[str, list] = {}
    queries = []
    for o in outputs:
        queries.append(_collecting(build_output(spark, plan, o), o, batches, ours, tmp / "cp" / o))
        plain = plain_outputs(plan.source.read_stream(spark, rows * batches), settings, [o])[o]
        queries.append(_collecting(plain, o, batches, theirs, tmp / "cp" / f"plain_{o}"))
    pending = list(queries)
    try:  # each query is stopped once it has done its batches (after the batch in flight: one cut short
        # may print a Java stack overflow), so that it leaves the cores to the others
        while pending:
            failed = [q for q in pending if q.exception() is not None]
            if failed:
                raise SystemExit(f"query {failed[0].name} failed: {failed[0].exception()}")
            for q in [q for q in pending if q.lastProgress and q.lastProgress["batchId"] >= batches - 1]:
                stop_after_batch([q], immediate=False, force=threading.Event())
                pending.remove(q)
            time.sleep(0.1)
    finally:
        stop_after_batch(pending, immediate=True, force=threading.Event())

    def rows_of(name: str, got: list) -> list:
        return [Row(**{k: v for k, v in r.asDict().items() if k != "reason"}) for r in got] if name == "dead-letters" else got

    return {o: (len(ours[o]), len(theirs[o]), _compare(rows_of(o, ours[o]), rows_of(o, theirs[o]))) for o in outputs}


def run_check(outputs: list[str], rows: int, batches: int, feed: str) -> bool:
    """``check_outputs`` in a session of its own, a line per output; whether every output is equal."""
    from speedlayer.runtime.session import build_session

    tmp = Path(tempfile.mkdtemp(prefix="whole-job-check-"))
    spark = build_session("local[*]", {"spark.ui.enabled": "false"}, app_name="whole-job-check", log_file=tmp / "spark.log")
    try:
        results = check_outputs(spark, outputs, rows, batches, tmp, feed)
    finally:
        spark.stop()
    for name, (n_ours, n_theirs, why) in results.items():
        verdict = "equal" if why is None else f"NOT equal: {why}"
        print(f"{name:<13} {verdict:<10} speedlayer {n_ours:>6,} rows, plain {n_theirs:>6,} rows", flush=True)
    return all(why is None for _, _, why in results.values())


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
    p.add_argument("--configs",
                   help="comma-separated configurations, each one output or several joined by + (default: each "
                        "output alone, then all seven together)")
    p.add_argument("--layouts", default="separate", help="separate, one, one-reused, one-shuffled, plain (comma-separated)")
    p.add_argument("--rows-per-batch", type=int, help="events a micro-batch (default 100,000)")
    p.add_argument("--batches", type=int, help="measured micro-batches (default 4)")
    p.add_argument("--warmup", type=int, default=2, help="micro-batches before measuring (default 2)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--check", action="store_true",
                   help="instead of measuring: speedlayer's outputs against the plain ones over the same micro-batches "
                        "(--configs' outputs, default all seven; --rows-per-batch default 400, --batches default 3)")
    p.add_argument("--feed", choices=("check", "bench"), default="check",
                   help="--check's feed: a small slow one where every output has rows (default), or the benchmark's")
    p.add_argument("--child", nargs=2, metavar=("LAYOUT", "OUTPUTS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.check:
        outputs = list(dict.fromkeys(o for config in (args.configs or "+".join(ALL)).split(",") for o in config.split("+")))
        raise SystemExit(0 if run_check(outputs, args.rows_per_batch or 400, args.batches or 3, args.feed) else 1)
    args.rows_per_batch, args.batches = args.rows_per_batch or 100_000, args.batches or 4
    if args.child:
        layout, outputs = args.child
        print(json.dumps(measure(layout, outputs.split("+"), args.rows_per_batch, args.batches, args.warmup)))
        return
    results = []
    for config in (args.configs or ",".join([*ALL, "+".join(ALL)])).split(","):
        for layout in args.layouts.split(","):
            if layout.startswith("one") and "+" not in config:
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
