"""Where the fleet job's extra time per event goes, timed in batch (no state store) in one JVM.

    .venv/bin/python bench/decode_profile.py
    .venv/bin/python bench/decode_profile.py --conf spark.driver.extraJavaOptions=-XX:-DontCompileHugeMethods

Every variant is written to Spark's ``noop`` sink; the variants run interleaved, ``--repeats``
times after one warm-up pass, and the median is printed with the size of the largest method that
whole-stage codegen generated for it (HotSpot does not JIT-compile a method over 8000 bytes of
bytecode unless -XX:-DontCompileHugeMethods is given: such a stage runs in the interpreter).

Generator + parse (the generator's events computed from ``spark.range`` every time):

  gen+parse              ``from_json(value)`` into the typed schema: the optimizer folds the
                         generator's ``value`` expression into the from_json projection (the plain
                         job's plan shape)
  gen+parse, value kept  the same, but ``value`` is also selected, so it is computed inside the
                         generator's codegen stage (the plan shape of speedlayer's decode, which
                         reads ``value`` again for its "empty payload" check)

Decoding only (RAW rows computed once and cached):

  plain from_json        what bench/plain_fleet.py does
  text from_json         speedlayer's first step alone: from_json into all-string fields + _corrupt_record
  text + typed           ... plus its typed conversions (trim, rlike, try_cast, isnan), no checks
  speedlayer decode      ``speedlayer.decode.validate.decode(raw, VEHICLE_EVENT).events`` (checks, dead-letter filter)

Whole job in batch (generator included): ``plain_windows`` vs speedlayer's ``build_output(batch=True)``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

URI = ("generator://?seed=7&rows_per_batch=200000&rate=20000&late=0&malformed=0&duplicates=0.01"
       "&start=2025-01-01T00:00:00Z")


def largest_method(df) -> int:
    """Bytes of bytecode of the largest method whole-stage codegen generates for ``df``."""
    stages = df._jdf.queryExecution().debug().codegenToSeq().iterator()
    largest = 0
    while stages.hasNext():
        largest = max(largest, int(stages.next()._3().maxMethodCodeSize()))
    return largest


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting, repeatable")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        profile(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def profile(args: argparse.Namespace, tmp: Path) -> None:
    from pyspark.sql import functions as F

    from plain_fleet import EVENT_SCHEMA, plain_windows, raw_batch
    from speedlayer.decode.validate import _CORRUPT, _text_schema, _typed, decode
    from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT
    from speedlayer.runtime.build import build_output
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.session import build_session
    from speedlayer.runtime.settings import RunSettings

    conf = dict(item.split("=", 1) for item in args.conf)
    spark = build_session(args.master, conf, app_name="bench-decode-profile", log_file=tmp / "spark.log")
    n = args.events
    # (columns reordered so that Spark's cache does not also serve the uncached variants' identical plans)
    cached = raw_batch(spark, URI, n).select("ingest_time", "value", "key", "offset").cache()
    cached.count()
    plan = plan_run(RunSettings(job="fleet", source=URI, sinks={"windows": "memory:x"}, max_events=n,
                                state_dir=str(tmp / "unused")))

    def parse():
        return F.from_json("value", EVENT_SCHEMA).alias("e")

    def text_json():  # speedlayer's own parse step (private helpers of speedlayer.decode.validate, profiling only)
        options = {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}
        return F.from_json("value", _text_schema(VEHICLE_EVENT), options).alias("j")

    variants = {
        "gen+parse": lambda: raw_batch(spark, URI, n).select(parse()).select("e.*"),
        "gen+parse, value kept": lambda: raw_batch(spark, URI, n).select("value", parse()).select("value", "e.*"),
        "plain from_json": lambda: cached.select(parse()).select("e.*"),
        "text from_json": lambda: cached.select(text_json()).select("j.*"),
        "text + typed": lambda: cached.select(text_json()).select(
            *(_typed(f, F.col(f"j.{f.name}")).alias(f.name) for f in VEHICLE_EVENT.fields)),
        "speedlayer decode": lambda: decode(cached, VEHICLE_EVENT).events,
        "plain job (batch)": lambda: plain_windows(raw_batch(spark, URI, n)),
        "speedlayer job (batch)": lambda: build_output(spark, plan, "windows", batch=True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.repeats + 1):  # round 0 warms the JIT up and is not counted
        for name, build in variants.items():
            df = build()
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            if round_:
                times[name].append(time.perf_counter() - t0)
    print(f"{n:,} events, median of {args.repeats} runs (min .. max), {args.master}"
          + (f", conf {conf}" if conf else ""))
    for name, values in times.items():
        med = statistics.median(values)
        print(f"  {name:<24}{med:>7.2f} s  ({min(values):.2f} .. {max(values):.2f})"
              f"  {med / n * 1e6:>6.2f} us/event   largest generated method {largest_method(variants[name]()):>5} bytes")
    spark.stop()


if __name__ == "__main__":
    main()
