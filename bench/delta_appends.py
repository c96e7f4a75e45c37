"""What the Delta sink's micro-batches cost with Delta's default snapshot partitions and with speedlayer's.

    .venv/bin/python bench/delta_appends.py              # 3 rounds
    .venv/bin/python bench/delta_appends.py --rounds 5

Each round runs the same bounded fleet job from the CLI twice, its alerts into a fresh Delta table:
once as speedlayer starts it (Delta's snapshot rebuilt in one task per core) and once with Delta's
own default (``--conf spark.databricks.delta.snapshotPartitions=50``), alternating which goes first.
It times the whole process and reads the run's batches and the table's commits. Prints the medians
and their ratio; writes ``bench/results/delta_appends.json``.
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

ROOT = Path(__file__).resolve().parent.parent
EVENTS, RATE = 20_000, 1_000
SIDES = {"speedlayer": [], "delta default (50)": ["--conf", "spark.databricks.delta.snapshotPartitions=50"]}


def one_run(extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="delta-appends-") as work:
        table = Path(work) / "alerts"
        command = [sys.executable, "-m", "speedlayer", "run", "fleet", "--max-events", str(EVENTS), "--no-live",
                   "--spark-ui", "off", "--source", f"generator://?rate={RATE}&vehicles=200&seed=5",
                   "--sink", f"alerts=delta:{table}", "--state-dir", str(Path(work) / "state"), *extra]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"failed: {' '.join(command)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        summary = json.loads((Path(work) / "state" / "last-run.json").read_text())
        commits = len(list((table / "_delta_log").glob("*.json")))
    batches = summary["queries"][0]["batches"]
    return {"process_s": seconds, "batches": batches, "commits": commits, "per_batch_s": seconds / batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
        for side in order:
            runs[side].append(one_run(SIDES[side]))
            last = runs[side][-1]
            print(f"round {r + 1} {side:20s} {last['process_s']:6.1f} s, {last['batches']} batches, "
                  f"{last['commits']} commits", flush=True)
    medians = {side: statistics.median(r["process_s"] for r in rs) for side, rs in runs.items()}
    ratio = medians["speedlayer"] / medians["delta default (50)"]
    print(f"median whole run: speedlayer {medians['speedlayer']:.1f} s, Delta's default "
          f"{medians['delta default (50)']:.1f} s: {ratio:.2f}x the time")
    out = ROOT / "bench" / "results" / "delta_appends.json"
    out.write_text(json.dumps({"events": EVENTS, "rate": RATE, "runs": runs, "median_process_s": medians,
                               "time_ratio": ratio}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
