"""Time per micro-batch of the congestion output in update vs complete mode as its state grows.

    .venv/bin/python bench/congestion_modes.py                                  # 10k, 100k, 1M keys
    .venv/bin/python bench/congestion_modes.py --keys 10000,100000 --batches 3  # a reduced run

The seeds' contrast between DStream's ``updateStateByKey`` (every key rewritten every batch: cost
proportional to the state) and ``mapWithState`` (only the keys in the batch: cost proportional to
the batch) is, in Structured Streaming, complete vs update output mode of the same aggregation.
For each state size K and each mode, one query runs ``zone_congestion`` (the fleet job's function)
over a landing directory of Parquet files read one file per batch (trigger availableNow):

- batch 0 fills the state: K events, one per minute of event time, all in one zone, so K keys
  (zone-minutes);
- then ``--batches`` measured batches of ``--batch`` events each (default 10,000), at minutes drawn
  at random among the K: every batch touches existing keys only, so the state stays at K keys.

There is no watermark here, on purpose: with one, update mode would also drop closed windows from
its state, and this measures the cost of the mode, not of eviction. Each measured batch is timed
by Spark's own ``durationMs.triggerExecution``; the figure kept is the median. The sink is
``noop``: rows are produced (all K in complete mode, at most ``--batch`` in update mode) but not
written anywhere. Prints JSON (also written to ``--out``), with the load average, since other
work on the machine moves wall-clock figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_OUT = ROOT / "bench" / "results" / "congestion_modes.json"
ORIGIN = pd.Timestamp("2026-11-22T00:00:00")
MITTE = (52.52, 13.40)  # zone Z01 of the built-in table


def _events(minutes: np.ndarray, first_id: int, rng: np.random.Generator) -> pd.DataFrame:
    n = len(minutes)
    times = ORIGIN + pd.to_timedelta(minutes, unit="min") + pd.to_timedelta(rng.integers(0, 60_000, n), unit="ms")
    return pd.DataFrame({
        "event_id": [f"e-{i}" for i in range(first_id, first_id + n)],
        "vehicle_id": [f"V{i % 2000:04d}" for i in range(first_id, first_id + n)],
        "event_time": times.astype("datetime64[us]"),
        "speed_kmh": rng.uniform(5, 60, n).round(1),
        "lat": np.full(n, MITTE[0]),
        "lon": np.full(n, MITTE[1]),
        "ingest_time": times.astype("datetime64[us]"),
    })


def write_landing(directory: Path, keys: int, batch: int, batches: int, seed: int = 7) -> None:
    """The prefill file, then the measured batches' files, with increasing modification times."""
    rng = np.random.default_rng(seed)
    frames = [_events(np.arange(keys), 0, rng)]
    frames += [_events(rng.integers(0, keys, batch), keys + i * batch, rng) for i in range(batches)]
    for i, frame in enumerate(frames):
        path = directory / f"part-{i:03d}.parquet"
        frame.to_parquet(path, index=False)
        os.utime(path, (1_800_000_000 + i, 1_800_000_000 + i))


def run_mode(spark, landing: Path, mode: str) -> dict:
    from speedlayer.pipelines.base import Params
    from speedlayer.pipelines.fleet.congestion import zone_congestion
    from speedlayer.pipelines.fleet.schemas import VEHICLE_EVENT

    checkpoint = Path(tempfile.mkdtemp(prefix="congestion-bench-"))
    try:
        events = spark.readStream.schema(VEHICLE_EVENT.spark_type()).option("maxFilesPerTrigger", 1).parquet(str(landing))
        query = (zone_congestion(events, Params()).writeStream.format("noop").outputMode(mode)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    measured = batches[1:]
    state = [op["numRowsTotal"] for op in measured[-1]["stateOperators"]]
    return {
        "mode": mode,
        "fill_batch_ms": batches[0]["durationMs"]["triggerExecution"],
        "batch_ms": [p["durationMs"]["triggerExecution"] for p in measured],
        "median_batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in measured),
        "state_rows": state[0] if state else None,
        "rows_out_per_batch": [p["sink"]["numOutputRows"] for p in measured],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10000,100000,1000000", help="state sizes, comma-separated")
    parser.add_argument("--batch", type=int, default=10_000, help="events per measured batch")
    parser.add_argument("--batches", type=int, default=5, help="measured batches per run")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()

    from speedlayer.runtime.session import build_session

    spark = build_session(args.master, {"spark.ui.enabled": "false"}, app_name="bench-congestion-modes")
    results, started = [], time.time()
    load_before = os.getloadavg()
    for keys in (int(k) for k in args.keys.split(",")):
        landing = Path(tempfile.mkdtemp(prefix="congestion-landing-"))
        try:
            write_landing(landing, keys, args.batch, args.batches)
            for mode in ("update", "complete"):
                result = {"keys": keys, **run_mode(spark, landing, mode), "loadavg_1min": os.getloadavg()[0]}
                results.append(result)
                print(json.dumps(result), flush=True)
        finally:
            shutil.rmtree(landing, ignore_errors=True)
    spark.stop()
    report = {
        "benchmark": "congestion update vs complete mode, time per batch as state grows",
        "batch_events": args.batch, "measured_batches": args.batches, "master": args.master,
        "cpu_count": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "elapsed_s": round(time.time() - started, 1), "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "results"}))


if __name__ == "__main__":
    main()
