"""``make run``'s job written by hand in plain PySpark: its alerts' latency since ingest beside speedlayer's.

The plain side is what a user would write without speedlayer for the same job, on the same input:
the generator's rows (``make run``'s source, paced to the millisecond with at most 10,000 rows a
batch, made into vehicle pings by the generator's own expressions, as ``plain_fleet`` borrows them),
the fleet's windows and alerts written by hand (``plain_fleet``: ``from_json``, a 5 s watermark,
``dropDuplicatesWithinWatermark``, the zone limit as a ``CASE WHEN``), each its own query to the
console, back-to-back batches, in a session with speedlayer's settings (``build_session``). Its
sources start at the generator's clock (their checkpoints say so), as speedlayer's do. The latency
since ingest is computed as speedlayer's ``/metrics`` computes it: a batch's end minus the 1st
percentile of its events' ingest time (``percentile_approx`` observed in the batch), read every 5 s,
the median of the readings of the last 30 s. A run of 5 minutes or more also says whether the
latency stayed flat (``soak_trend.verdict`` over the readings after the first third).

Rounds alternate, each side a fresh process: speedlayer as ``make run`` starts it (the dashboard on),
speedlayer without the dashboard, plain PySpark; ``--sides`` picks others, among them ``dedup exact``
(``make run`` with speedlayer's own default, ``--dedup exact``), ``rate``, ``rate exact`` and
``plain rate`` (on Spark's ``rate`` source, whole seconds at a time, without ``max_per_batch``), and
``one query`` (``--one-query``: both outputs of one query, one read and one dedup).

    .venv/bin/python bench/make_run_plain.py --seconds 150 --rounds 2
    .venv/bin/python bench/make_run_plain.py --seconds 600 --rounds 1 --sides "make run"
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

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from soak_trend import verdict, warmup_minutes  # noqa: E402
from speedlayer.runtime.metrics import epoch_ms  # noqa: E402
from targets import MAKE_RUN_SOURCE, STEADY_S, latency  # noqa: E402

OBSERVATION = "plain_latency"
#: make run's input on Spark's rate source (whole seconds, no admission control), as make run read it before
RATE_SOURCE = MAKE_RUN_SOURCE.replace("&max_per_batch=10000", "")
assert RATE_SOURCE != MAKE_RUN_SOURCE, "make run's source no longer has max_per_batch=10000: update RATE_SOURCE"
#: a run this long also says whether its latency stayed flat
TREND_FROM_S = 300


def _ended_ms(progress) -> int:
    return epoch_ms(progress["timestamp"]) + progress["durationMs"]["triggerExecution"]


def plain_side(seconds: int, uri: str = MAKE_RUN_SOURCE) -> dict:
    """In this process: the plain job for ``seconds`` on the generator ``uri``; its alerts' and windows' p99 since ingest."""
    from pyspark.sql import functions as F

    from plain_fleet import PlainSettings, alerts, windows
    from speedlayer.runtime.session import build_session
    from speedlayer.sources import open_source

    tmp = Path(tempfile.mkdtemp(prefix="plain-make-run-"))
    spark = build_session("local[*]", {"spark.ui.enabled": "false"}, app_name="plain-make-run", log_file=tmp / "spark.log")
    # the input is the one thing borrowed: the generator's rows, its clock chosen and written into each
    # fresh checkpoint as the rate source's start, as a speedlayer run does
    source, run_state = open_source(uri), {}
    source.pin(run_state)
    source.pin_at_start(run_state)
    queries = {}
    for name, build in (("windows", windows), ("alerts", alerts)):
        source.prepare_checkpoint(tmp / name, ["rate"])
        observed = source.read_stream(spark).observe(
            OBSERVATION, F.count(F.lit(1)).alias("events"),
            F.percentile_approx(F.unix_millis("ingest_time"), F.array(F.lit(0.01)), 1000).alias("ingest_ms"))
        queries[name] = (build(observed, PlainSettings()).writeStream.format("console").outputMode("append")
                         .option("checkpointLocation", str(tmp / name)).start())
    began, readings = time.monotonic(), []
    while time.monotonic() - began < seconds:
        time.sleep(5)
        reading = {"at_s": round(time.monotonic() - began, 1)}
        for name, query in queries.items():
            # the newest batch that read events (a stateful query runs no-data batches in between, as
            # speedlayer's /metrics also skips)
            for progress in reversed(query.recentProgress):
                seen = (progress.observedMetrics or {}).get(OBSERVATION)
                if seen and seen["events"]:
                    reading[name] = (_ended_ms(progress) - seen["ingest_ms"][0]) / 1000
                    break
        readings.append(reading)
    batches = {name: (q.lastProgress or {}).get("batchId") for name, q in queries.items()}
    recent = [p["durationMs"]["triggerExecution"] / 1000 for p in queries["alerts"].recentProgress[-20:]]
    for query in queries.values():
        query.stop()
    spark.stop()
    steady = [r for r in readings if r["at_s"] >= readings[-1]["at_s"] - STEADY_S]
    medians = {name: [r[name] for r in steady if name in r] for name in queries}
    return {"side": "plain", "source": uri, "seconds": seconds, "batches": batches,
            "alerts_batch_s": statistics.mean(recent) if recent else None,
            **{f"{name}_p99_since_ingest_s": statistics.median(v) if v else None for name, v in medians.items()},
            "readings": readings}


def plain_in_child(seconds: int, uri: str = MAKE_RUN_SOURCE) -> dict:
    """``plain_side`` in a fresh process (a fresh JVM, as each speedlayer run has)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, __file__, "--plain-side", "--plain-source", uri, "--seconds", str(seconds),
                        "--out", out.name], check=True, stdout=subprocess.DEVNULL)
        return json.loads(Path(out.name).read_text())


#: the sides a round can run, each in a fresh process: name -> its run
SIDES = {"make run": lambda seconds: latency(seconds, one_query=False),
         "no dashboard": lambda seconds: latency(seconds, one_query=False, dashboard=False),
         "dedup exact": lambda seconds: latency(seconds, one_query=False, extra=()),
         "plain": plain_in_child,
         "rate": lambda seconds: latency(seconds, one_query=False, source=RATE_SOURCE),
         "rate exact": lambda seconds: latency(seconds, one_query=False, extra=(), source=RATE_SOURCE),
         "plain rate": lambda seconds: plain_in_child(seconds, RATE_SOURCE),
         "one query": lambda seconds: latency(seconds, one_query=True)}


def latency_trend(side: dict) -> dict | None:
    """Whether a side's alerts' p99 since ingest stayed flat over its run (``soak_trend.verdict``
    after the first third), or None for a run shorter than ``TREND_FROM_S``."""
    if side["seconds"] < TREND_FROM_S:
        return None
    if "p99_by_time_s" in side:  # speedlayer's: (at, since the event, since ingest)
        points = [(at, ingest) for at, _, ingest in side["p99_by_time_s"] if ingest is not None]
    else:
        points = [(r["at_s"], r["alerts"]) for r in side["readings"] if "alerts" in r]
    t_min = [at / 60 for at, _ in points]
    return verdict(t_min, [p99 for _, p99 in points], warmup_minutes(side["seconds"] / 60))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=150, help="length of each run (default 150)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the sides, alternating (default 2)")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "make_run_plain.json")
    p.add_argument("--sides", default="make run,no dashboard,plain",
                   help=f"comma-separated, in each round's order: {', '.join(SIDES)} (default: make run,no dashboard,plain)")
    p.add_argument("--plain-side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plain-source", default=MAKE_RUN_SOURCE, help=argparse.SUPPRESS)
    args = p.parse_args()
    sides_asked = [s.strip() for s in args.sides.split(",")]
    if unknown := [s for s in sides_asked if s not in SIDES]:
        p.error(f"--sides: unknown {', '.join(unknown)}; choose from {', '.join(SIDES)}")
    if args.plain_side:
        args.out.write_text(json.dumps(plain_side(args.seconds, args.plain_source)))
        return
    rounds = []
    for i in range(args.rounds):
        sides = {name: SIDES[name](args.seconds) for name in sides_asked}
        for side in sides.values():
            side["latency_trend"] = latency_trend(side)
        rounds.append(sides)
        print(f"round {i + 1}: alerts' p99 since ingest: "
              + ", ".join(f"{name} {side['alerts_p99_since_ingest_s']:.2f} s (batches {side['alerts_batch_s'] or 0:.2f} s"
                          + (f", {side['latency_trend']['verdict']}" if side["latency_trend"] else "") + ")"
                          for name, side in sides.items()), flush=True)
    args.out.write_text(json.dumps({"benchmark": "make_run_plain", "command": " ".join(sys.argv),
                                    "seconds": args.seconds, "rounds": rounds}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
