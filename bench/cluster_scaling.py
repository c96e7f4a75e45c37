"""The fleet job on a standalone cluster of one worker next to two workers (one core each), on this machine.

    .venv/bin/python bench/cluster_scaling.py                     # 600k events, 150k per batch, 2 rounds
    .venv/bin/python bench/cluster_scaling.py --events 200000 --rounds 1

For each round and each cluster size (alternating: 1 worker, 2 workers, 1, 2, ...), a fresh
cluster is started from the installed pyspark (``speedlayer.testing.StandaloneCluster``, workers
with the virtual environment hidden), and ``speedlayer run fleet --master spark://...`` reads
``--events`` generator events (``rows_per_batch`` per micro-batch, trigger processing:0s) into
Parquet (windows and alerts), shipping speedlayer to the executors as a user's run does.

Measured per run: the whole command's wall time (what a user waits, start-up included), the run's
own elapsed time (from its first query's start to the stop, as the run summary prints it), and the
CPU seconds of the driver (the command and its JVM) and of the executors (every process under the
workers, read from /proc just before the cluster stops). Scaling = wall time on one worker / wall
time on two, median over rounds. The JSON result goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_OUT = ROOT / "bench" / "results" / "cluster_scaling.json"
START = "2025-01-01T00:00:00Z"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    """User + system CPU ticks of a live process (0 once it is gone), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def run_watching(command: list[str], cwd: Path, roots: list[int]) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``command``; meanwhile sample the CPU of every process below ``roots`` (executors end with the app)."""
    from speedlayer.testing.cluster import descendants

    seen: dict[int, int] = {}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}) as process:
        while process.poll() is None:
            for root in roots:
                for pid, _ in descendants(root):
                    seen[pid] = max(seen.get(pid, 0), cpu_ticks(pid))
            time.sleep(0.5)
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), sum(seen.values()) / TICKS


def one_run(workers: int, args: argparse.Namespace, tmp: Path, name: str) -> dict:
    from speedlayer.testing.cluster import StandaloneCluster

    source = (f"generator://?seed=7&late=0&malformed=0&duplicates=0&rows_per_batch={args.per_batch}"
              f"&rate={args.per_batch}&start={START}")
    with StandaloneCluster(tmp / f"cluster-{name}", workers=workers, cores=1, memory=args.executor_memory) as cluster:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = [sys.executable, "-m", "speedlayer", "run", "fleet", "--source", source,
                   "--sink", f"windows=parquet:{tmp / name / 'windows'}", "--sink", f"alerts=parquet:{tmp / name / 'alerts'}",
                   "--trigger", "processing:0s", "--max-events", str(args.events), "--state-dir", str(tmp / name / "state"),
                   "--master", cluster.url, "--spark-ui", "off", "--no-live",
                   "--conf", f"spark.executor.memory={args.executor_memory}"]
        started = time.monotonic()
        result, executors_cpu = run_watching(command, tmp, [w.process.pid for w in cluster.workers])
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"run {name} failed:\n{result.stderr[-3000:]}")
    elapsed = re.search(r"stopped by .* after ([\d,.]+)s", result.stdout)
    batches = re.search(r"│ windows .*?│ (\d+)\s+│", result.stdout)
    return {"workers": workers, "wall_s": round(wall, 2),
            "run_s": float(elapsed.group(1).replace(",", "")) if elapsed else None,
            "batches": int(batches.group(1)) if batches else None,
            "driver_cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
            "executors_cpu_s": round(executors_cpu, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--per-batch", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--executor-memory", default="2g")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="speedlayer-bench-cluster-"))
    os.environ.setdefault("SPEEDLAYER_CACHE_DIR", str(tmp / "ship-cache"))
    runs: dict[int, list[dict]] = {1: [], 2: []}
    try:
        for round_no in range(args.rounds):
            for workers in (1, 2):
                run = one_run(workers, args, tmp, f"r{round_no}-w{workers}")
                runs[workers].append(run)
                print(f"round {round_no + 1}, {workers} worker(s): wall {run['wall_s']} s, run {run['run_s']} s, "
                      f"driver CPU {run['driver_cpu_s']} s, executors CPU {run['executors_cpu_s']} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = {w: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "run_s", "driver_cpu_s", "executors_cpu_s")}
              for w, rs in runs.items()}
    summary = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cores": os.cpu_count(),
               "load_average": os.getloadavg(), "events": args.events, "per_batch": args.per_batch,
               "median": median, "scaling_wall": round(median[1]["wall_s"] / median[2]["wall_s"], 3),
               "scaling_run": round(median[1]["run_s"] / median[2]["run_s"], 3), "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: summary[k] for k in ("median", "scaling_wall", "scaling_run")}))


if __name__ == "__main__":
    main()
