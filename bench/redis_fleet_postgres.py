"""Sustained events/s of the fleet job from Redis Streams into PostgreSQL, next to Parquet in the same run.

    .venv/bin/python bench/redis_fleet_postgres.py                       # 300k events, 4 shards, 2 rounds
    .venv/bin/python bench/redis_fleet_postgres.py --events 100000 --rounds 1

``speedlayer produce`` first publishes ``--events`` generator events (seed 7, late=0) to a fresh
stream on the local Redis. Then, alternating for ``--rounds`` rounds, the fleet job runs through
speedlayer's runner (one SparkSession, ``--master``): windows and alerts (append mode) read the
stream with ``max_records_per_trigger=--per-trigger`` under ``processing:0s`` and are written to

- ``postgres``: a fresh PostgreSQL database (tables created by the sink, upserts by key),
- ``parquet``: Spark's file sink in a temporary directory (the baseline: same source and job,
  the cheapest exactly-once sink),

each run bounded by ``--max-events`` (it ends once every event is read and windows are flushed).
Sustained events/s = events / the job's busy time, from the first batch's start to the last
batch's end over both queries (they run side by side on the same cores, as in production).
The JSON result goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_OUT = ROOT / "bench" / "results" / "redis_fleet_postgres.json"


def busy_seconds(history: list[dict]) -> float:
    """From the first batch's start to the last batch's end, over all reports of all queries."""
    starts, ends = [], []
    for report in history:
        begin = datetime.fromisoformat(report["timestamp"].replace("Z", "+00:00"))
        starts.append(begin)
        ends.append(begin + timedelta(milliseconds=report["durationMs"]["triggerExecution"]))
    return (max(ends) - min(starts)).total_seconds()


def run_job(spark, source: str, sinks: dict[str, str], events: int, state: Path) -> dict:
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    settings = RunSettings(job="fleet", source=source, sinks=sinks, max_events=events, trigger="processing:0s",
                           state_dir=str(state))
    run = Run(spark, plan_run(settings))
    started = time.monotonic()
    summary = run.start_and_wait()
    wall = time.monotonic() - started
    history = [r for q in run.tracker.snapshot().values() for r in q.history if r.get("numInputRows", 0) > 0]
    busy = busy_seconds(history)
    return {"events": events, "busy_s": round(busy, 2), "events_per_s": round(events / busy), "wall_s": round(wall, 2),
            "batches": {q.output: q.batches for q in summary.queries}, "stopped_by": summary.stopped_by}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-trigger", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    import psycopg
    import redis

    from speedlayer.runtime.session import build_session

    stream = f"bench_fleet_{uuid.uuid4().hex[:8]}"
    target = f"{args.redis}?stream={stream}&shards={args.shards}"
    start = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tmp = Path(tempfile.mkdtemp(prefix="speedlayer-bench-"))
    client = redis.Redis.from_url(args.redis)
    databases: list[str] = []
    results: dict[str, list[dict]] = {"postgres": [], "parquet": []}
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "speedlayer", "produce", "--to", target, "--rate", "0",
                        "--max-events", str(args.events), "--generator", f"generator://?seed=7&late=0&start={start}",
                        "--no-progress"], check=True, cwd=tmp)
        produce_s = time.monotonic() - t0
        source = f"{target}&max_records_per_trigger={args.per_trigger}"
        spark = build_session(args.master, {"spark.ui.enabled": "false"}, app_name="bench-redis-fleet-postgres",
                              log_file=tmp / "spark.log")
        for round_no in range(args.rounds):
            for side in ("postgres", "parquet"):
                state = tmp / f"state-{side}-{round_no}"
                if side == "postgres":
                    db = f"bench_{uuid.uuid4().hex[:10]}"
                    with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
                        conn.execute(f'CREATE DATABASE "{db}"')
                    databases.append(db)
                    sinks = dict.fromkeys(("windows", "alerts"), f"{args.postgres}/{db}")
                else:
                    sinks = {o: f"parquet://{tmp}/out-{round_no}/{o}" for o in ("windows", "alerts")}
                result = run_job(spark, source, sinks, args.events, state)
                results[side].append(result)
                print(f"round {round_no + 1} {side:<8} {result['events_per_s']:>9,} events/s "
                      f"(busy {result['busy_s']} s, wall {result['wall_s']} s, batches {result['batches']})", flush=True)
        spark.stop()
    finally:
        for key in client.scan_iter(f"{stream}*"):
            client.delete(key)
        with psycopg.connect(f"{args.postgres}/postgres", autocommit=True) as conn:
            for db in databases:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)

    median = {side: statistics.median(r["events_per_s"] for r in runs) for side, runs in results.items()}
    summary = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cores": os.cpu_count(),
        "load_average": os.getloadavg(), "events": args.events, "shards": args.shards, "per_trigger": args.per_trigger,
        "produce_s": round(produce_s, 2), "median_events_per_s": median,
        "postgres_vs_parquet": round(median["postgres"] / median["parquet"], 3), "runs": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("median_events_per_s", "postgres_vs_parquet", "produce_s")}))


if __name__ == "__main__":
    main()
