"""speedlayer's seven fleet outputs against PyFlink's (``bench/peers/flink_seven.py``): equal rows, then wall time.

    .venv/bin/python bench/flink_seven_check.py                          # the check, then 3 rounds on 200,000 events
    .venv/bin/python bench/flink_seven_check.py --no-measure             # the check alone
    .venv/bin/python bench/flink_seven_check.py --no-check --events 500000 --rounds 3

Both read a dataset ``speedlayer produce --to files:`` wrote, event times starting a day before
now (so that the generator's clocks gone two days ahead are ahead of the files' modification time,
the ingest time of both, and are dead letters). PyFlink reads it as one file, in order
(``run_peers.one_file``); its venv is ``run_peers.py --setup``'s.

The check: 1,200 events (10 a second, 20 vehicles, 5% late, 5% re-sent, 2% malformed; trips gap
10 s and cut at 30 s, incidents after 2 s, so that every output has rows). speedlayer reads a file
per micro-batch (``max_files_per_trigger=1``; files of 10 s of events, the first two holding one
event each): Spark drops as late what lies behind the previous batch's watermark, and with
batches this short that judges the late events (30-90 s late) as Flink's watermark, which moves
with the records, does. Each output's rows are compared sorted, floats within 1e-9; every window,
trip or incident Flink writes at the end of its input (its last watermark is the end of time) is
left out where speedlayer's final watermark (newest event time minus 5 s) has not closed it; dead
letters are compared by payload, late events without ``missed_watermark`` and with speedlayer's
``copies`` spread into one row per copy (Flink writes a row per late record).

The measurement: each engine in a fresh process, whole process wall time (start-up included),
alternating speedlayer and PyFlink in each round, on the job's default settings; the ratio of a
round is PyFlink's wall time over speedlayer's (above 1: speedlayer is faster), and the result is
the median of the rounds' ratios. Results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SPEEDLAYER = ROOT / ".venv" / "bin" / "speedlayer"
sys.path.insert(0, str(BENCH / "peers"))
from common import input_files, parse_time_ms, read_lines  # noqa: E402
from flink_env import PEERS_VENV  # noqa: E402
from run_peers import one_file, watch_descendants  # noqa: E402

FLINK_PYTHON = PEERS_VENV / "flink" / "bin" / "python"
FLINK_SEVEN = BENCH / "peers" / "flink_seven.py"
OUTPUTS = ("windows", "sliding", "alerts", "dead-letters", "incidents", "trips", "late")
WATERMARK_MS = 5_000
CHECK_FEED = "generator://?seed=39&rate=10&vehicles=20&late=0.05&duplicates=0.05&malformed=0.02"
CHECK_OPTIONS = {"trip-gap": "10s", "max-trip": "30s", "incident-after": "2s"}
CHECK_EVENTS, CHECK_FILE_EVENTS = 1_200, 100
MEASURE_FEED = "generator://?seed=7&rate=5000&vehicles=2000&late=0.005&duplicates=0.01&malformed=0.002"
#: timestamp columns (compared as epoch ms) per output
TIMES = {"windows": ("window_start", "window_end"), "sliding": ("window_start", "window_end"), "alerts": ("event_time",),
         "dead-letters": ("ingest_time",), "incidents": ("started_at", "ended_at", "closed_at"),
         "trips": ("trip_start", "trip_end"), "late": ("event_time", "window_start", "window_end", "missed_watermark")}
#: the columns compared (the rest are each engine's own: reasons, offsets, the watermark a batch missed)
COMPARED = {"dead-letters": ("payload",), "late": ("event_id", "vehicle_id", "event_time", "speed_kmh", "lat", "lon",
                                                   "window_start", "window_end")}


def start_of_feed() -> str:
    """A day before now, on the hour: event times in the past, clocks two days ahead in the future."""
    start = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def produce(directory: Path, feed: str, events: int, start: str, chunk: int, alone: int = 0) -> None:
    """``speedlayer produce`` into ``directory``: files of ``chunk`` events, after ``alone`` files of one event."""
    def run(first: int, count: int, chunk: int) -> None:
        subprocess.run([str(SPEEDLAYER), "produce", "--to", f"files:{directory}", "--generator", feed, "--start", start,
                        "--rate", "0", "--from-event", str(first), "--max-events", str(count), "--chunk", str(chunk),
                        "--no-progress"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    if alone:
        run(0, alone, 1)
    run(alone, events - alone, chunk)


def speedlayer_command(dataset: Path, work: Path, options: dict[str, str], per_file: bool) -> list[str]:
    source = f"files://{dataset}?format=json" + ("&max_files_per_trigger=1" if per_file else "")
    sinks = [a for o in OUTPUTS for a in ("--sink", f"{o}=parquet://{work / 'out' / o}")]
    flags = [a for k, v in options.items() for a in (f"--{k}", v)]
    return [str(SPEEDLAYER), "run", "fleet", "--source", source, "--trigger", "available-now", *sinks,
            "--state-dir", str(work / "state"), "--no-live", *flags]


def flink_command(dataset: Path, work: Path, options: dict[str, str], mode: str = "thread") -> list[str]:
    flags = [a for k, v in options.items() for a in (f"--{k}", v)]
    return [str(FLINK_PYTHON), str(FLINK_SEVEN), str(one_file(dataset)), str(work / "out"), "--parallelism", "2",
            "--execution-mode", mode, *flags]


def timed(command: list[str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run ``command`` to its end (killed past ``timeout_s``): wall time, CPU time of it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timer = _killer(proc, timeout_s)
        descendants = watch_descendants(proc)
        timer.cancel()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"ok": proc.returncode == 0, "returncode": proc.returncode, "wall_s": round(wall, 2),
            "cpu_s": round(child + descendants, 2), "load_average": os.getloadavg()[0]}


def _killer(proc: subprocess.Popen, timeout_s: float):
    import threading

    def kill() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the process and its JVM, nothing else
    timer = threading.Timer(timeout_s, kill)
    timer.start()
    return timer


# --- reading and comparing -------------------------------------------------------------------------


def read_speedlayer(out: Path, name: str) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(str(out / name))
    for column in TIMES[name]:
        if column in table.column_names:
            i = table.column_names.index(column)
            table = table.set_column(i, column, table[column].cast(pa.timestamp("ms")).cast(pa.int64()))
    return table.to_pylist()


def _epoch_ms(text: str | None) -> int | None:
    if text is None:
        return None
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def read_flink(out: Path, name: str) -> list[dict]:
    rows = [json.loads(line) for line in read_lines(sorted(p for p in (out / name).glob("part-*") if p.is_file()))]
    for r in rows:
        r.update({c: _epoch_ms(r.get(c)) for c in TIMES[name]})
    return rows


def final_watermark(dataset: Path, dead_letters: list[dict]) -> int:
    """speedlayer's last watermark: the newest event time of the lines it took as events, minus 5 s."""
    refused = {r["payload"] for r in dead_letters}
    newest = max(parse_time_ms(json.loads(line)["event_time"]) for line in read_lines(input_files(dataset))
                 if line.strip() and line.rstrip("\n") not in refused)
    return newest - WATERMARK_MS


def closed(name: str, row: dict, watermark: int, options: dict[str, str]) -> bool:
    """Whether speedlayer's final watermark has closed this window, trip or incident (other rows: always)."""
    if name in ("windows", "sliding"):
        return row["window_end"] <= watermark
    if name == "trips":
        return row["trip_end"] + duration_ms(options.get("trip-gap", "5min")) <= watermark
    if name == "incidents":
        return row["closed_at"] <= watermark
    return True


def duration_ms(text: str) -> int:
    units = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000}
    number = text.rstrip("smhin")
    return int(float(number) * units[text[len(number):]])


def _sort_key(row: tuple) -> tuple:
    return tuple((0, "") if v is None else (1, round(v, 6)) if isinstance(v, float) else (1, v) for v in row)


def _same(a: tuple, b: tuple) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) if isinstance(x, float) and isinstance(y, (int, float))
               else x == y for x, y in zip(a, b))


def compare(name: str, ours: list[dict], theirs: list[dict], watermark: int, options: dict[str, str]) -> dict[str, Any]:
    """One output's rows, sorted, floats within 1e-9: equal or not, with the counts and the first difference."""
    rows = len(ours)
    if name == "late":  # a row per late copy, as Flink writes them
        ours = [r for r in ours for _ in range(r["copies"])]
    columns = COMPARED.get(name) or tuple(ours[0] if ours else theirs[0] if theirs else ())
    kept_ours = [r for r in ours if closed(name, r, watermark, options)]
    kept_theirs = [r for r in theirs if closed(name, r, watermark, options)]
    a = sorted((tuple(r.get(c) for c in columns) for r in kept_ours), key=_sort_key)
    b = sorted((tuple(r.get(c) for c in columns) for r in kept_theirs), key=_sort_key)
    equal = len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    first = None if equal else next(([x, y] for x, y in zip(a, b) if not _same(x, y)), [a[len(b):][:1], b[len(a):][:1]])
    return {"equal": equal, "speedlayer_rows": rows, "speedlayer_rows_per_copy": len(ours), "flink_rows": len(theirs),
            "compared_rows": len(a),
            "flink_rows_open_at_speedlayer_end": len(theirs) - len(kept_theirs),
            "speedlayer_rows_past_its_end": len(ours) - len(kept_ours), "columns": list(columns),
            "first_difference": None if equal else [str(v) for v in first]}


# --- the check and the measurement -----------------------------------------------------------------


def check(work: Path, timeout_s: float) -> dict[str, Any]:
    dataset = work / "check"
    start = start_of_feed()
    produce(dataset, CHECK_FEED, CHECK_EVENTS, start, CHECK_FILE_EVENTS, alone=2)
    runs = {}
    for engine, command in (("speedlayer", speedlayer_command(dataset, work / "sl", CHECK_OPTIONS, per_file=True)),
                            ("flink", flink_command(dataset, work / "flink", CHECK_OPTIONS))):
        (work / engine).mkdir(exist_ok=True)
        runs[engine] = timed(command, work / f"{engine}-check.log", timeout_s)
        if not runs[engine]["ok"]:
            raise SystemExit(f"{engine} failed; its log: {work / f'{engine}-check.log'}")
    ours = {o: read_speedlayer(work / "sl" / "out", o) for o in OUTPUTS}
    theirs = {o: read_flink(work / "flink" / "out", o) for o in OUTPUTS}
    watermark = final_watermark(dataset, ours["dead-letters"])
    results = {o: compare(o, ours[o], theirs[o], watermark, CHECK_OPTIONS) for o in OUTPUTS}
    for o, r in results.items():
        extra = f", {r['flink_rows_open_at_speedlayer_end']} more written by Flink at end of input" \
            if r["flink_rows_open_at_speedlayer_end"] else ""
        if r["speedlayer_rows_per_copy"] != r["speedlayer_rows"]:
            extra += f" (speedlayer's {r['speedlayer_rows']} rows count {r['speedlayer_rows_per_copy']} copies)"
        print(f"{o:<13} {'equal' if r['equal'] else 'NOT equal':<10} speedlayer {r['speedlayer_rows']:>5} rows, "
              f"PyFlink {r['flink_rows']:>5} rows; compared {r['compared_rows']}{extra}"
              + ("" if r["equal"] else f"; first difference {r['first_difference']}"), flush=True)
    return {"feed": CHECK_FEED, "events": CHECK_EVENTS, "start": start, "options": CHECK_OPTIONS,
            "speedlayer_final_watermark_ms": watermark, "runs": runs, "outputs": results}


def measure(work: Path, events: int, rounds: int, timeout_s: float, mode: str) -> dict[str, Any]:
    dataset = work / f"measure-{events}"
    start = start_of_feed()
    produce(dataset, MEASURE_FEED, events, start, 50_000)
    one_file(dataset)  # made before the clock starts, as the dataset itself
    runs: list[dict[str, Any]] = []
    for i in range(1, rounds + 1):
        walls = {}
        for engine in ("speedlayer", "flink"):
            run_dir = work / f"{engine}-{i}"
            command = (speedlayer_command(dataset, run_dir, {}, per_file=False) if engine == "speedlayer"
                       else flink_command(dataset, run_dir, {}, mode))
            run_dir.mkdir()
            r = timed(command, work / f"{engine}-{i}.log", timeout_s)
            r.update(engine=engine, round=i, rows=_rows(engine, run_dir / "out") if r["ok"] else None)
            runs.append(r)
            walls[engine] = r["wall_s"] if r["ok"] else None
            shutil.rmtree(run_dir, ignore_errors=True)
            print(f"  round {i} {engine:<10} {r['wall_s']:7.1f} s wall {r['cpu_s']:7.1f} s CPU "
                  f"{events / r['wall_s']:>9,.0f} events/s  {'ok' if r['ok'] else 'FAILED'}  "
                  f"(load average {r['load_average']:.1f})", flush=True)
        if all(walls.values()):
            runs[-1]["ratio_flink_over_speedlayer"] = walls["flink"] / walls["speedlayer"]
    ratios = [r["ratio_flink_over_speedlayer"] for r in runs if "ratio_flink_over_speedlayer" in r]
    summary = {engine: statistics.median(r["wall_s"] for r in runs if r["engine"] == engine and r["ok"])
               for engine in ("speedlayer", "flink") if any(r["engine"] == engine and r["ok"] for r in runs)}
    result = {"feed": MEASURE_FEED, "events": events, "start": start, "rounds": rounds, "flink_execution_mode": mode,
              "runs": runs,
              "median_wall_s": summary, "ratios": ratios,
              "median_ratio_flink_over_speedlayer": statistics.median(ratios) if ratios else None}
    if ratios:
        print(f"median wall: speedlayer {summary['speedlayer']:.1f} s, PyFlink {summary['flink']:.1f} s; "
              f"PyFlink / speedlayer per round {', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}")
    return result


def _rows(engine: str, out: Path) -> dict[str, int]:
    if engine == "speedlayer":
        import pyarrow.parquet as pq

        return {o: pq.read_table(str(out / o)).num_rows for o in OUTPUTS}
    return {o: sum(1 for _ in read_lines(sorted((out / o).glob("part-*")))) for o in OUTPUTS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-check", action="store_true", help="skip the equal-rows check")
    p.add_argument("--no-measure", action="store_true", help="skip the wall-time measurement")
    p.add_argument("--events", type=int, default=200_000, help="events of the measurement's dataset (default 200,000)")
    p.add_argument("--rounds", type=int, default=3, help="measurement rounds, each running both once (default 3)")
    p.add_argument("--flink-mode", choices=("thread", "process"), default="thread",
                   help="PyFlink's Python execution mode in the measurement (default thread)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds after which a run is killed (default 240)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (datasets, outputs, logs)")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "flink_seven.json")
    args = p.parse_args()
    if not FLINK_PYTHON.exists():
        raise SystemExit(f"no PyFlink venv at {FLINK_PYTHON}: run .venv/bin/python bench/peers/run_peers.py --setup")
    work = Path(tempfile.mkdtemp(prefix="flink-seven-"))
    result: dict[str, Any] = {"benchmark": "flink_seven", "command": " ".join(["bench/flink_seven_check.py", *sys.argv[1:]]),
                              "load_average_at_start": list(os.getloadavg())}
    try:
        if not args.no_check:
            result["check"] = check(work, args.timeout)
        if not args.no_measure:
            result["measure"] = measure(work, args.events, args.rounds, args.timeout, args.flink_mode)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["load_average_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
