"""Soak: does a long fleet run keep its memory and its disk flat? (``make soak``)

    .venv/bin/python bench/soak.py                   # 30 minutes at 3,000 events/s, a sample every 30 s
    .venv/bin/python bench/soak.py --minutes 120     # make soak ARGS="--minutes 120"
    .venv/bin/python bench/soak.py --quick           # 3 minutes, a sample every 10 s

Runs the fleet job as a user would, from the CLI in a subprocess (``speedlayer run fleet`` on
``generator://?rate=R&vehicles=2000&seed=7``, ``--no-live``, ``--metrics-port``; batches 10 s
apart, as six outputs on 2 cores are best run, and RocksDB's memory bounded at 256 MB, a budget
its cache fills within the warm-up at this rate: ``--trigger`` and ``--max-state-memory`` set
others, ``--trigger processing:0s`` for back-to-back batches), with windows,
alerts, incidents, trips, late events and dead letters written to Parquet under a temporary
directory. Once every output has finished a batch (start-up is not what a soak measures; it is
recorded as ``up_after_s``), every ``--every`` seconds a sample records (``soak_probe.py``):

- resident memory (VmRSS) of the driver JVM, of Spark's Python workers together (the sum over the
  Python processes below the JVM: forked workers share pages, so the sum overstates what they take
  together) and of the CLI's own Python process;
- the JVM's heap used and committed, its old generation used and metaspace (``jstat -gc``;
  metaspace stands for non-heap: the code cache and thread stacks are not in it);
- per query and stateful operator, state rows and state memory; per query, the mean batch duration
  since the last sample and the latency since ingest (p50, p99) of its newest batch (``/metrics``);
- the checkpoints' size on disk and each output directory's.

Each series is judged flat or not after a warm-up (``--warmup``, by default the first third of the
run or 10 minutes, whichever is less) by ``soak_trend.verdict``: least-squares slopes per minute
over the two halves of what follows; flat when the second half's fitted growth is at most 10% of
the first half's plus a noise floor of 1% of the series' median (outputs, which grow by design:
when their slope does not rise more than 10%). ``noisy`` means the run was too short to tell.

At the end the run is stopped as Ctrl-C stops it (SIGINT; the CLI finishes its batches and exits)
and its outputs are checked against the plain-Python oracle over the same events, regenerated
with ``speedlayer produce`` (``soak_oracle.py``, which says what is checked and what is not).
The series, verdicts and check go to ``bench/results/soak-<minutes>min.json``, the plot beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from soak_oracle import check  # noqa: E402
from soak_probe import Probe, scrape  # noqa: E402
from soak_trend import verdict, warmup_minutes  # noqa: E402

OUTPUTS = ("windows", "alerts", "incidents", "trips", "late", "dead-letters")
#: six outputs on 2 cores keep their latency with room between batches
TRIGGER = "processing:10s"
#: RocksDB's budget for all state stores: one its cache fills before the warm-up ends at 3,000 events/s
#: (at the CLI's 500 MB it fills for about an hour, and the driver's memory with it)
STATE_MEMORY = "256m"
#: the CLI stops itself this long after the soak's end if the soak died without stopping it
BACKSTOP_S = 900
STOP_TIMEOUT_S = 240
#: how long the run may take to finish a first batch of every output before the soak gives up
STARTUP_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_command(uri: str, work: Path, port: int, minutes: float, trigger: str | None = None,
                max_state_memory: str | None = None) -> list[str]:
    """The ``speedlayer run fleet`` command of the soak: every output to Parquet under ``work``."""
    sinks = [arg for o in OUTPUTS for arg in ("--sink", f"{o}=parquet:{work / 'out' / o}")]
    return [sys.executable, "-m", "speedlayer", "run", "fleet", "--source", uri, "--state-dir", str(work / "state"),
            "--no-live", "--metrics-port", str(port), *sinks, "--duration", f"{int(minutes * 60) + BACKSTOP_S}s",
            *(["--trigger", trigger] if trigger else []),
            *(["--max-state-memory", max_state_memory] if max_state_memory else [])]


def stop(process: subprocess.Popen) -> dict:
    """SIGINT, as Ctrl-C; wait for the run to exit (killed after ``STOP_TIMEOUT_S``)."""
    began = time.monotonic()
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=STOP_TIMEOUT_S)
        killed = False
    except subprocess.TimeoutExpired:
        process.kill()
        code, killed = process.wait(), True
    return {"exit_code": code, "stop_s": round(time.monotonic() - began, 1), "killed": killed}


def _stop_with_the_soak() -> None:
    """In the run's process, before it starts: SIGTERM (a graceful stop) when the soak's own process dies,
    however it dies (a caller's timeout kills it outright), so that no run outlives its soak. Linux only."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_until_up(process: subprocess.Popen, probe: Probe, timeout_s: float = STARTUP_TIMEOUT_S) -> float | None:
    """Seconds from launch until every output's query has finished a batch that read events (None: the
    run ended or ``timeout_s`` passed first; a rate source's first batch is empty). A soak's minutes
    count from there: start-up is not what it measures."""
    began, wanted = time.monotonic(), {f"fleet_{o.replace('-', '_')}" for o in OUTPUTS}
    while process.poll() is None and time.monotonic() - began < timeout_s:
        queries = scrape(probe.metrics_url) or {}
        if all(queries.get(q, {}).get("input_rows", 0) > 0 for q in wanted):
            return round(time.monotonic() - began, 1)
        time.sleep(1)
    return None


def sample_run(process: subprocess.Popen, probe: Probe, minutes: float, every: float) -> list[dict]:
    """A sample every ``every`` seconds from now until ``minutes`` have passed (or the run ends)."""
    began, samples = time.monotonic(), []
    while True:
        due = began + (len(samples) + 1) * every
        if due - began > minutes * 60 or process.poll() is not None:
            return samples
        time.sleep(max(0.0, due - time.monotonic()))
        s = {"t_min": round((time.monotonic() - began) / 60, 3), **probe.sample()}
        samples.append(s)
        state_rows = sum(v for q in s["queries"].values() for v in q["state_rows"].values())
        print(f"  {s['t_min']:6.2f} min  JVM {s['rss_mb']['driver_jvm'] or 0:7.0f} MB  workers "
              f"{s['rss_mb']['python_workers']:6.0f} MB  heap {s['jvm'].get('heap_used_mb', 0):6.0f} MB  "
              f"state rows {state_rows:9,.0f}  checkpoints {s['disk_mb']['checkpoints']:7.1f} MB", flush=True)


def series(samples: list[dict]) -> dict[str, dict]:
    """Every measured series by name: its unit, sample times (minutes) and values (None where absent)."""
    out: dict[str, dict] = {}

    def put(name: str, unit: str, i: int, value, grows: bool = False) -> None:
        s = out.setdefault(name, {"unit": unit, "grows_by_design": grows, "values": [None] * len(samples)})
        s["values"][i] = value

    for i, s in enumerate(samples):
        for proc, mb in s["rss_mb"].items():
            put(f"rss {proc.replace('_', ' ')}", "MB", i, mb)
        for kind, mb in s.get("driver_mappings", {}).items():
            put(f"driver jvm {kind}", "MB", i, mb)
        for kind, value in s.get("driver_jvm", {}).items():
            put(f"driver jvm {kind.removesuffix('_mb').replace('_', ' ')}", "threads" if kind == "threads" else "MB",
                i, value)
        put("python workers", "processes", i, s["python_workers"])
        for key in ("heap_used_mb", "heap_committed_mb", "old_used_mb", "metaspace_used_mb"):
            put(f"jvm {key.removesuffix('_mb').replace('_', ' ')}", "MB", i, s["jvm"].get(key))
        for query, q in sorted(s["queries"].items()):
            short = query.removeprefix("fleet_")
            for op, rows in q["state_rows"].items():
                put(f"{short} state rows {op}", "rows", i, rows)
                put(f"{short} state memory {op}", "MB", i, q["state_memory_bytes"].get(op, 0) / 1e6)
            put(f"{short} batch duration", "s", i, _interval_mean(samples, i, query))
            for percentile in ("p50", "p99"):
                put(f"{short} latency since ingest {percentile}", "s", i, q["latency_ingest_s"].get(percentile))
        for where, mb in s["disk_mb"].items():
            put(f"disk {where}", "MB", i, mb, grows=where != "checkpoints")
    for s in out.values():
        s["t_min"] = [x["t_min"] for x in samples]
    return out


def _interval_mean(samples: list[dict], i: int, query: str) -> float | None:
    """A query's mean batch duration between sample ``i - 1`` and sample ``i`` (None: no batch ended)."""
    now = samples[i]["queries"].get(query, {})
    before = samples[i - 1]["queries"].get(query, {}) if i else {}
    count = now.get("batch_duration_seconds_count", 0) - before.get("batch_duration_seconds_count", 0)
    total = now.get("batch_duration_seconds_sum", 0) - before.get("batch_duration_seconds_sum", 0)
    return total / count if count > 0 else None


def print_table(named: dict[str, dict], warmup: float) -> None:
    print(f"\nslopes per minute after a {warmup:.1f}-minute warm-up (growth: the fitted change over each half)")
    print(f"{'series':<52} {'unit':>9} {'1st half':>12} {'2nd half':>12} {'growth 1st':>12} {'growth 2nd':>12}  verdict")
    for name, s in named.items():
        first, second = s.get("first_half"), s.get("second_half")
        if first is None:
            print(f"{name:<52} {s['unit']:>9} {'':>51}  {s['verdict']}")
            continue
        print(f"{name:<52} {s['unit']:>9} {first['slope_per_min']:>12.3g} {second['slope_per_min']:>12.3g} "
              f"{first['growth']:>12.3g} {second['growth']:>12.3g}  {s['verdict']}")


def print_check(found: dict) -> None:
    """One line per output checked against the oracle."""
    if "error" in found:
        print(f"  not checked: {found['error']}")
        return
    w, a, d, late = (found[k] for k in ("windows", "alerts", "dead-letters", "late"))
    print(f"  events {found['first_event']:,} to {found['first_event'] + found['events_regenerated']:,}; "
          f"windows closed by {found['windows_closed_by']}, checked since {found['checked_since']}")
    print(f"  windows      {w['checked']:>9,} checked: {w['exact']:,} exact, {w['exact with late events']:,} exact with "
          f"late events counted, {w['between']:,} between; {w['mismatched_count']} wrong, {w['missing_count']} missing, "
          f"{w['duplicated']} twice -> {'ok' if w['ok'] else 'FAILED'}")
    print(f"  alerts       {a['checked']:>9,} checked ({a['expected at least']:,} expected at least): "
          f"{a['missing_count']} missing, {a['wrong_count']} wrong -> {'ok' if a['ok'] else 'FAILED'}")
    print(f"  dead-letters {d['checked']:>9,} checked ({d['expected']:,} expected): {d['missing_count']} missing, "
          f"{d['unexpected_count']} unexpected -> {'ok' if d['ok'] else 'FAILED'}")
    print(f"  late         {late['checked']:>9,} checked: {late['on_time_kept_count']} on-time events kept "
          f"-> {'ok' if late['ok'] else 'FAILED'}")


def machine() -> dict:
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    memory_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemTotal:"))
    return {"cores": os.cpu_count(), "memory_gb": round(memory_kb / 1024 ** 2, 1), "java": java[0] if java else None,
            "pyspark": pyspark.__version__, "python": platform.python_version(), "platform": platform.platform()}


PANELS = (("resident memory (MB)", lambda n: n.startswith("rss ")),
          ("JVM heap and metaspace (MB)", lambda n: n.startswith("jvm ")),
          ("state rows", lambda n: " state rows " in n),
          ("state memory (MB)", lambda n: " state memory " in n),
          ("batch duration, latency since ingest p99 (s)", lambda n: n.endswith(("batch duration", "p99"))),
          ("disk (MB)", lambda n: n.startswith("disk ")))


def plot(named: dict[str, dict], warmup: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(14, 12), sharex=True)
    for ax, (panel, wanted) in zip(axes.flat, PANELS):
        for name, s in named.items():
            if wanted(name):
                points = [(t, v) for t, v in zip(s["t_min"], s["values"]) if v is not None]
                ax.plot([p[0] for p in points], [p[1] for p in points], label=f"{name} ({s['verdict']})", linewidth=1)
        ax.axvline(warmup, color="grey", linestyle=":", linewidth=1)
        ax.set_title(panel, fontsize=10)
        ax.legend(fontsize=6, loc="best")
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes since the run was launched (dotted: end of the warm-up)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long the run goes on (default 30)")
    p.add_argument("--rate", type=int, default=3000, help="generator events/s (default 3000)")
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples (default 30)")
    p.add_argument("--quick", action="store_true", help="3 minutes, a sample every 10 s")
    p.add_argument("--warmup", type=float, help="minutes left out of the slopes (default: a third of the run, at most 10)")
    p.add_argument("--check-minutes", type=float, default=30.0,
                   help="check the last N minutes of closed windows against the oracle (0: all; default 30)")
    p.add_argument("--no-check", action="store_true", help="skip the check against the oracle")
    p.add_argument("--out-dir", type=Path, default=BENCH / "results", help="where the JSON and the plot go")
    p.add_argument("--keep", action="store_true", help="keep the run's state and outputs (printed at the end)")
    p.add_argument("--trigger", default=TRIGGER, help=f"the run's --trigger (default {TRIGGER}; processing:0s: back to back)")
    p.add_argument("--max-state-memory", default=STATE_MEMORY,
                   help=f"the run's --max-state-memory (default {STATE_MEMORY}; the CLI's own is 500m)")
    args = p.parse_args(argv)
    if args.quick:
        args.minutes, args.every = 3.0, 10.0
    if args.warmup is None:
        args.warmup = warmup_minutes(args.minutes)
    return args


def soak_run(args: argparse.Namespace, uri: str, work: Path) -> dict:
    """Launch the run, sample it for ``args.minutes``, stop it; the samples and how it ended."""
    port = free_port()
    command = run_command(uri, work, port, args.minutes, args.trigger, args.max_state_memory)
    print(f"soak: {args.minutes:g} min at {args.rate:,} events/s, a sample every {args.every:g} s; run in {work}", flush=True)
    print("  " + shlex.join(command), flush=True)
    with open(work / "run.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work,
                                   preexec_fn=_stop_with_the_soak)
        probe = Probe(process.pid, f"http://127.0.0.1:{port}/metrics", work / "state" / "checkpoints",
                      {o: work / "out" / o for o in OUTPUTS})
        try:
            up_after_s = wait_until_up(process, probe)
            allocator = probe.allocator()
            if up_after_s is None:
                print(f"  the run finished no batch of every output within {STARTUP_TIMEOUT_S} s; see {work / 'run.log'}",
                      flush=True)
                samples = []
            else:
                print(f"  every output finished a batch {up_after_s} s after launch (the driver's malloc: {allocator}); "
                      "sampling from now", flush=True)
                samples = sample_run(process, probe, args.minutes, args.every)
            ended_early = up_after_s is None or process.poll() is not None
        finally:
            stopped = stop(process)
    tail = (work / "run.log").read_text(errors="replace").splitlines()[-40:]
    return {"run_command": shlex.join(command), "up_after_s": up_after_s, "allocator": allocator,
            "ended_early": ended_early, "stop": stopped,
            "run_log_tail": tail if ended_early or stopped["exit_code"] else [], "samples": samples}


def oracle_check(args: argparse.Namespace, uri: str, work: Path) -> dict:
    print("\nchecking the outputs against the oracle (speedlayer produce regenerates the events) ...", flush=True)
    try:
        found = check(work / "state", {o: work / "out" / o for o in OUTPUTS}, uri, args.rate, args.check_minutes, work)
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        found = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print_check(found)
    return found


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    uri = f"generator://?rate={args.rate}&vehicles=2000&seed=7"
    work = Path(tempfile.mkdtemp(prefix="speedlayer-soak-"))
    run = soak_run(args, uri, work)
    named = series(run["samples"])
    for s in named.values():
        s.update(verdict(s["t_min"], s["values"], args.warmup, s["grows_by_design"]))
    print_table(named, args.warmup)
    found = oracle_check(args, uri, work) if not (args.no_check or run["ended_early"]) else None
    results = {"benchmark": "soak", "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "command": shlex.join([Path(sys.executable).name, *sys.argv]), "machine": machine(),
               "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               **run, "series": named, "oracle": found}
    label = (f"{args.minutes:g}min" + (f"-{args.trigger.replace(':', '-')}" if args.trigger != TRIGGER else "")
             + (f"-state{args.max_state_memory}" if args.max_state_memory != STATE_MEMORY else ""))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"soak-{label}.json").write_text(json.dumps(results, separators=(",", ":"), default=str) + "\n")
    plot(named, args.warmup, f"soak: fleet job, {args.minutes:g} min at {args.rate:,} events/s "
         f"({results['machine']['cores']} cores)", args.out_dir / f"soak-{label}.png")
    stopped = run["stop"]
    print(f"\nstopped by SIGINT in {stopped['stop_s']} s, exit code {stopped['exit_code']}"
          f"{' (killed)' if stopped['killed'] else ''}; results in {args.out_dir / f'soak-{label}.json'}")
    if args.keep:
        print(f"run kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    done = main()
    failed = done["ended_early"] or done["stop"]["killed"] or done["stop"]["exit_code"] != 0 or \
        (done["oracle"] is not None and not done["oracle"].get("ok"))
    sys.exit(1 if failed else 0)
