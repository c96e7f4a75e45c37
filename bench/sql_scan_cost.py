"""What a heavy ad-hoc SQL query costs a running job's batches, with the fair scheduler's pools and without.

    .venv/bin/python bench/sql_scan_cost.py                       # both variants, ~5 min
    .venv/bin/python bench/sql_scan_cost.py --variants pools --rate 1000

Each variant runs ``speedlayer run fleet`` from the CLI (generator at ``--rate`` events/s, windows and
alerts into Parquet, the SQL endpoint on), lets it warm up, then times the windows query's batches
for ``--seconds`` with nothing else asked (the baseline), then for as long again while a client
asks the running job, through Spark Connect as ``speedlayer sql`` does, one heavy statement after
another: a ``count(DISTINCT ...)`` over ``--scan-rows`` generated rows in 16 partitions. A batch's
time is its commit file's modification time minus its offsets file's (Spark writes the offsets when
it plans the batch, the commit when the sink has committed it), read at the end of each phase.

- ``pools``: as a run starts by default: the run's queries in the ``streams`` pool (weight 4), the
  ad-hoc query in ``default`` (weight 1).
- ``fifo``: ``--conf spark.scheduler.mode=FIFO``: Spark's default scheduling, jobs in arrival order.

Prints JSON (also written to ``--out``): per variant the batches' median and p90 in each phase, their
ratio, and how many heavy statements finished meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_OUT = ROOT / "bench" / "results" / "sql_scan_cost.json"
HEAVY = "SELECT count(DISTINCT id % 1000003) AS n FROM range(0, {rows}, 1, 16)"


def batch_seconds(checkpoint: Path, since: float, until: float) -> list[float]:
    """Durations of the batches planned between two wall-clock times, from the checkpoint's files."""
    durations = []
    for offsets in (checkpoint / "offsets").glob("[0-9]*"):
        commit = checkpoint / "commits" / offsets.name
        planned = offsets.stat().st_mtime
        if commit.is_file() and since <= planned < until:
            durations.append(commit.stat().st_mtime - planned)
    return sorted(durations)


def summary(durations: list[float]) -> dict:
    if not durations:
        return {"batches": 0}
    p90 = durations[min(len(durations) - 1, int(0.9 * len(durations)))]
    return {"batches": len(durations), "median_s": round(statistics.median(durations), 3), "p90_s": round(p90, 3)}


def wait_for(check, log: Path, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for the run to start: its log is {log}")


def variant(name: str, rate: int, seconds: float, warmup: float, scan_rows: int) -> dict:
    from speedlayer.monitor.sql_views import query
    from speedlayer.runtime.sql_endpoint import ENDPOINT_FILE, connect, recorded_endpoint

    work = Path(tempfile.mkdtemp(prefix=f"sql-scan-{name}-"))
    state = work / "state"
    extra = ["--conf", "spark.scheduler.mode=FIFO"] if name == "fifo" else []
    cmd = [sys.executable, "-m", "speedlayer", "run", "fleet", "--source", f"generator://?rate={rate}&seed=7",
           "--sink", f"windows=parquet:{work / 'windows'}", "--sink", f"alerts=parquet:{work / 'alerts'}",
           "--state-dir", str(state), "--no-live", "--duration", str(int(warmup + 2 * seconds + 120)),
           "--retain-batches", "500", *extra]  # every batch of the phases kept until it is timed
    log = work / "run.log"
    # the Connect client of an earlier variant marks this process as Connect's: the run is classic Spark
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env)
    try:
        wait_for(lambda: (state / ENDPOINT_FILE).is_file() or job.poll() is not None, log)
        if job.poll() is not None:
            raise SystemExit(f"the {name} run stopped early: {log.read_text()[-2000:]}")
        spark = connect(recorded_endpoint(state))
        time.sleep(warmup)
        checkpoint = state / "checkpoints" / "windows"
        t0 = time.time()
        time.sleep(seconds)
        t1 = time.time()
        quiet = batch_seconds(checkpoint, t0, t1)
        done, stop = [], threading.Event()

        def ask() -> None:
            while not stop.is_set():
                started = time.time()
                query(spark, HEAVY.format(rows=scan_rows), limit=10, timeout_s=600)
                done.append(time.time() - started)

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        time.sleep(seconds)
        t2 = time.time()
        busy = batch_seconds(checkpoint, t1, t2)
        stop.set()
        asker.join(timeout=600)
        spark.stop()
    finally:
        job.send_signal(signal.SIGINT)
        job.wait(timeout=300)
    q, b = summary(quiet), summary(busy)
    return {"variant": name, "quiet": q, "with_scan": b, "scans_finished": len(done),
            "scan_s": [round(s, 2) for s in done],
            "median_ratio": round(b["median_s"] / q["median_s"], 2) if q.get("batches") and b.get("batches") else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="pools,fifo")
    p.add_argument("--rate", type=int, default=2000, help="events/s from the generator")
    p.add_argument("--seconds", type=float, default=45.0, help="length of each phase")
    p.add_argument("--warmup", type=float, default=30.0)
    p.add_argument("--scan-rows", type=int, default=150_000_000)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    runs = [variant(v, args.rate, args.seconds, args.warmup, args.scan_rows) for v in args.variants.split(",")]
    result = {"command": " ".join(sys.argv), "cores": os.cpu_count(), "rate": args.rate, "seconds": args.seconds,
              "scan": HEAVY.format(rows=args.scan_rows), "load_avg": os.getloadavg(), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
