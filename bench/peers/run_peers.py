"""The fleet window job on speedlayer and its peers, alternating, on one generated JSON-lines dataset.

    .venv/bin/python bench/peers/run_peers.py --setup              # once: the peers' own venvs under bench/.peers-venv
    .venv/bin/python bench/peers/run_peers.py                      # 3 rounds on 200,000 events
    .venv/bin/python bench/peers/run_peers.py --events 1000000 --rounds 5 --engines speedlayer,plain,python

The dataset is written once by ``speedlayer produce --to files:...`` (no duplicates, late or
malformed events, so every engine's answer is the same exact set of windows). Each round runs
every engine once, in order (speedlayer, plain PySpark, Python, Bytewax, Flink, speedlayer, ...),
each in a fresh process: whole-process wall time and CPU time (user+sys of the process from
``resource.getrusage``, plus its descendants such as the JVM, sampled with psutil every 0.2 s
until they end), so start-up counts, as it does for a user. Each engine's
windows are checked equal to the plain-Python ones on every window the final watermark closed
(newest event time minus 5 s: a Spark query in append mode emits only those). Results (medians,
ratios to speedlayer) go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEERS = Path(__file__).resolve().parent
ROOT = PEERS.parents[1]
VENV = ROOT / ".venv" / "bin"
ENGINES = ("speedlayer", "plain", "python", "bytewax", "flink")
#: also runnable by name: speedlayer with ``--dedup fast``, to tell the exact dedup's share
VARIANTS = ("speedlayer-fast",)
#: the Spark engines, which write their windows as a Parquet directory (the others as JSON lines)
SPARK_ENGINES = ("speedlayer", "speedlayer-fast", "plain")
#: what each peer's own venv gets (exact pins; they conflict with pyspark's, hence separate venvs)
PEER_PACKAGES = {"bytewax": ["bytewax==0.21.1", "orjson==3.13.0"], "flink": ["apache-flink==2.3.0"]}
GENERATOR = "generator://?seed=7&vehicles=2000&rate=20000&late=0&duplicates=0&malformed=0"
START = "2026-01-01T00:00:00Z"

sys.path.insert(0, str(PEERS))
from common import WATERMARK_MS, WINDOW_MS, input_files, parse_time_ms, read_lines  # noqa: E402
from flink_env import PEERS_VENV, ensure_venv  # noqa: E402


def setup() -> None:
    for name, packages in PEER_PACKAGES.items():
        ensure_venv(PEERS_VENV / name, packages)
        print(f"{name}: {PEERS_VENV / name} with {' '.join(packages)}")


def ensure_dataset(directory: Path, events: int) -> None:
    if directory.is_dir() and input_files(directory):
        return
    subprocess.run([str(VENV / "speedlayer"), "produce", "--to", f"files:{directory}", "--max-events", str(events),
                    "--rate", "0", "--generator", GENERATOR, "--start", START, "--chunk", "50000", "--no-progress"],
                   check=True, cwd=ROOT)


def command(engine: str, dataset: Path, out: Path, tmp: Path, args: argparse.Namespace) -> list[str]:
    if engine in ("speedlayer", "speedlayer-fast"):  # -fast: Spark's own dedup, without the lowest-offset pass
        return [str(VENV / "speedlayer"), "run", "fleet", "--source", f"files://{dataset}?format=json",
                "--trigger", "available-now", "--sink", f"windows=parquet://{out}", "--state-dir", str(tmp / "state"),
                "--no-live", *(["--dedup", "fast"] if engine == "speedlayer-fast" else [])]
    if engine == "plain":
        return [str(VENV / "python"), str(PEERS / "plain_pyspark.py"), str(dataset), str(out)]
    if engine == "python":
        return [str(VENV / "python"), str(PEERS / "python_orjson.py"), str(dataset), str(out)]
    if engine == "bytewax":
        return [str(PEERS_VENV / "bytewax" / "bin" / "python"), str(PEERS / "bytewax_fleet.py"), str(dataset), str(out),
                "--workers", str(args.bytewax_workers)]
    return [str(PEERS_VENV / "flink" / "bin" / "python"), str(PEERS / "flink_fleet.py"), str(one_file(dataset)), str(out),
            "--parallelism", "2", "--runtime", args.flink_runtime]


def one_file(dataset: Path) -> Path:
    """The dataset as one JSON-lines file, in event order (made once, next to the dataset).

    Flink's file source hands whole files to its readers in no set order, so with many files a
    reader can read a later file before an earlier one, and its watermark then drops the earlier
    file's events as late (on 20 files: 8,000 of 10,000 windows differed). One file is one split,
    read in order by one reader, which is what a replay means (Bytewax gets one ordered partition
    for the same reason); the windows still run with parallelism 2.
    """
    directory = dataset.parent / f"{dataset.name}-one-file"
    target = directory / "all.jsonl"
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / ".all.jsonl.partial"
        with open(partial, "wb") as out:
            for path in input_files(dataset):
                out.write(path.read_bytes())
        partial.rename(target)
    return directory


def run_engine(engine: str, dataset: Path, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"peer-{engine}-"))
    out = tmp / ("windows" if engine in SPARK_ENGINES else "windows.jsonl")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    logs = tmp / "log.txt"
    t0 = time.perf_counter()
    with open(logs, "w") as log:
        proc = subprocess.Popen(command(engine, dataset, out, tmp, args), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        descendants = watch_descendants(proc)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        if proc.returncode != 0:
            return {"engine": engine, "ok": False, "error": logs.read_text()[-2000:], "wall_s": wall}
        windows = read_windows(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"engine": engine, "ok": True, "wall_s": wall, "cpu_s": child + descendants, "cpu_child_s": child,
            "cpu_descendants_s": descendants, "windows": windows}


def watch_descendants(proc: subprocess.Popen, every_s: float = 0.2) -> float:
    """Wait for ``proc``; return the CPU seconds of its descendants (a JVM that its child never
    waited for is not in ``RUSAGE_CHILDREN``), from their last sample before they ended."""
    import psutil

    last: dict[int, float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in root.children(recursive=True):
                try:
                    t = p.cpu_times()
                    last[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(every_s)
    return sum(last.values())


def read_windows(out: Path) -> dict[tuple[int, str], tuple]:
    """{(window start ms, vehicle): (events, avg, max, over)} from a peer's JSON lines or a Spark Parquet dir."""
    if out.is_dir():
        import pyarrow.parquet as pq

        table = pq.read_table(str(out)).to_pylist()
        rows = [{"window_start": int(r["window_start"].timestamp() * 1000) if hasattr(r["window_start"], "timestamp")
                 else int(r["window_start"]), **{k: r[k] for k in ("vehicle_id", "events", "avg_speed_kmh",
                                                                   "max_speed_kmh", "over_limit_events")}}
                for r in table]
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines() if line]
    return {(int(r["window_start"]), r["vehicle_id"]): (int(r["events"]), round(float(r["avg_speed_kmh"]), 6),
                                                      float(r["max_speed_kmh"]), int(r["over_limit_events"]))
            for r in rows}


def closed_until_ms(dataset: Path) -> int:
    newest = max(parse_time_ms(json.loads(line)["event_time"]) for line in read_lines(input_files(dataset)))
    return newest - WATERMARK_MS


def compare(windows: dict, reference: dict, closed_ms: int) -> dict[str, Any]:
    def closed(w: dict) -> dict:
        return {k: v for k, v in w.items() if k[0] + WINDOW_MS <= closed_ms}

    a, b = closed(windows), closed(reference)
    differing = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
    return {"closed_windows": len(b), "equal": not differing, "differing": len(differing),
            "example": [str(differing[0]), a.get(differing[0]), b.get(differing[0])] if differing else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setup", action="store_true", help="create the peers' venvs under bench/.peers-venv and exit")
    p.add_argument("--dataset", type=Path, default=PEERS / "data" / "fleet-200k",
                   help="directory of JSON-lines files, produced when missing (an existing one is reused as it is)")
    p.add_argument("--events", type=int, default=200_000, help="events of the dataset when it is produced (default 200,000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each running every engine once (default 3)")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"of {', '.join(ENGINES + VARIANTS)}")
    p.add_argument("--bytewax-workers", type=int, default=2)
    p.add_argument("--flink-runtime", choices=("streaming", "batch"), default="streaming")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "peers.json")
    args = p.parse_args()
    if args.setup:
        setup()
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if unknown := set(engines) - set(ENGINES) - set(VARIANTS):
        raise SystemExit(f"--engines: unknown {', '.join(sorted(unknown))}; choose from {', '.join(ENGINES + VARIANTS)}")
    dataset = args.dataset.resolve()
    ensure_dataset(dataset, args.events)
    events = sum(1 for _ in read_lines(input_files(dataset)))
    closed_ms = closed_until_ms(dataset)
    print(f"dataset {dataset}: {events:,} events in {len(input_files(dataset))} files; engines {', '.join(engines)}; "
          f"{args.rounds} rounds; load average {os.getloadavg()[0]:.1f}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    reference = None
    for i in range(1, args.rounds + 1):
        for engine in engines:
            r = run_engine(engine, dataset, args)
            if r["ok"]:
                if reference is None:
                    reference = run_engine("python", dataset, args)["windows"] if engine != "python" else r["windows"]
                r["check"] = compare(r.pop("windows"), reference, closed_ms)
                print(f"  round {i} {engine:<10} {r['wall_s']:7.1f}s wall {r['cpu_s']:7.1f}s CPU  "
                      f"{events / r['wall_s']:>9,.0f} events/s  equal: {r['check']['equal']} "
                      f"({r['check']['closed_windows']:,} closed windows)", flush=True)
            else:
                print(f"  round {i} {engine:<10} FAILED: {r['error'][-400:]}", flush=True)
            runs[engine].append(r)
    summary = {}
    for engine, rs in runs.items():
        ok = [r for r in rs if r["ok"]]
        if ok:
            summary[engine] = {"median_wall_s": statistics.median(r["wall_s"] for r in ok),
                               "median_cpu_s": statistics.median(r["cpu_s"] for r in ok),
                               "events_per_s": events / statistics.median(r["wall_s"] for r in ok),
                               "all_equal": all(r["check"]["equal"] for r in ok), "runs": len(ok)}
        else:
            summary[engine] = {"failed": rs[0]["error"][-1000:] if rs else "not run"}
    sl = summary.get("speedlayer", {})
    for s in summary.values():
        if "median_wall_s" in s and "median_wall_s" in sl:
            s["throughput_vs_speedlayer"] = sl["median_wall_s"] / s["median_wall_s"]
            s["cpu_vs_speedlayer"] = s["median_cpu_s"] / sl["median_cpu_s"]
    print(f"\n{'engine':<12}{'wall s':>9}{'CPU s':>9}{'events/s':>12}{'x speedlayer':>14}  equal")
    for engine, s in summary.items():
        if "failed" in s:
            print(f"{engine:<12} failed: {s['failed'][-200:]!r}")
        else:
            print(f"{engine:<12}{s['median_wall_s']:>9.1f}{s['median_cpu_s']:>9.1f}{s['events_per_s']:>12,.0f}"
                  f"{s.get('throughput_vs_speedlayer', float('nan')):>14.2f}  {s['all_equal']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "fleet_peers", "dataset": str(dataset), "events": events,
                                    "closed_until_ms": closed_ms, "rounds": args.rounds,
                                    "load_average_at_end": list(os.getloadavg()), "summary": summary, "runs": runs},
                                   indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
