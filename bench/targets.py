"""Where the whole fleet job stands against its speed targets, every figure from one run.

    .venv/bin/python bench/targets.py                 # ~45 min: 3 rounds of each part, peers included
    .venv/bin/python bench/targets.py --quick         # ~6 min: 1 round, small batches, no peers
    .venv/bin/python bench/targets.py --parts latency # one part

Four parts, each one after the other in this process's run (``make bench`` runs them all):

- ``whole-job``: the fleet job's seven outputs (windows, sliding, alerts, dead-letters, incidents,
  trips, late) against the same seven written in plain PySpark (``bench/plain_fleet.py``, a query
  each) on the same generator feed, in sustained running: rounds of (plain's seven as a query each,
  the seven in one query as ``--one-query`` runs them, the seven as a query each), each a fresh
  process (``bench/whole_job.py``). The ratios are medians of per-round ratios against plain's
  seven; ``source reads`` counts the source scans of one batch's plans.
- ``bounded``: a bounded run of the windows job over a generated JSON-lines dataset, start-up
  included, speedlayer against plain PySpark and, with ``--peers``, one Python thread, Bytewax and
  PyFlink (``bench/peers/run_peers.py``, whose ``--setup`` makes their venvs on first use). The ratio is the median of
  per-round ratios of wall times.
- ``flink-seven``: the seven outputs against the same seven in PyFlink (``bench/flink_seven_check.py``:
  its check of equal rows, then alternating bounded runs of 200,000 events, start-up included);
  skipped without the peers (``--quick``).
- ``latency``: ``make run``'s job (5,000 events/s, windows + alerts + the dashboard) for
  ``--latency-seconds``, its ``/metrics`` read every 5 s; alerts' p99 latency since the event and
  since ingest, the median of the readings of the last 30 s before the last one (and their
  highest). Once as ``make run`` starts it, once with ``--one-query``.

The table printed at the end is the one of docs/benchmarks.md's section "The whole job against its
targets, in one run"; the JSON goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from whole_job import ALL, run_config  # noqa: E402

SEVEN = "+".join(ALL)


def make_run_line(makefile: Path = ROOT / "Makefile") -> tuple[str, tuple[str, ...]]:
    """``make run``'s source and its other options (``--dashboard`` and ``$(ARGS)`` aside), read from its recipe."""
    recipe = makefile.read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    words = shlex.split(recipe.split("\n", 1)[1].replace("\\\n", " "))
    words = words[words.index("fleet") + 1:]
    at = words.index("--source")
    rest = words[:at] + words[at + 2:]
    return words[at + 1], tuple(w for w in rest if w not in ("--dashboard", "$(ARGS)"))


#: `make run`'s input and options, as the Makefile gives them
MAKE_RUN_SOURCE, MAKE_RUN_OPTIONS = make_run_line()
PEER_NAMES = {"python": "one Python thread", "bytewax": "Bytewax", "flink": "PyFlink"}
PARTS = ("whole-job", "bounded", "flink-seven", "latency")
#: the readings of a latency run's last seconds are its figure: the first batches (the JVM warming
#: up, every event since the generator's start) take far longer, into the run's second half on a slow host
STEADY_S = 30
#: whole job: speedlayer's seven against plain PySpark's seven, as a query each and in one query
GOALS = {"whole_job_separate": 1.0, "whole_job_one": 1.5, "bounded": 0.95, "latency_s": 2.0}


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median of per-round ratios ``ours[i] / theirs[i]`` (each round ran both sides back to back).

    >>> median_ratio([2.0, 3.0, 9.0], [1.0, 2.0, 3.0])
    2.0
    """
    return statistics.median(a / b for a, b in zip(ours, theirs))


def whole_job(rounds: int, rows: int, batches: int, warmup: int) -> dict:
    """Rounds of plain PySpark's seven (a query each), the seven in one query and the seven as a query each."""
    runs: dict[str, list[dict]] = {"plain": [], "one": [], "separate": []}
    for i in range(1, rounds + 1):
        for layout in runs:
            r = run_config(layout, SEVEN, rows, batches, warmup)
            runs[layout].append(r)
            print(f"  whole-job round {i} {layout:<9} {r['events_per_s']:>9,.0f} events/s, "
                  f"{r['source_reads_per_batch']} source reads a batch", flush=True)
    speed = {layout: [r["events_per_s"] for r in rs] for layout, rs in runs.items()}
    ratio = {layout: median_ratio(speed[layout], speed["plain"]) for layout in ("one", "separate")}
    return {"rows_per_batch": rows, "batches": batches, "warmup": warmup, "runs": runs,
            "events_per_s": {k: statistics.median(r["events_per_s"] for r in v) for k, v in runs.items()},
            "source_reads_per_batch": {k: v[0]["source_reads_per_batch"] for k, v in runs.items()},
            "ratio_to_plain": ratio}


def bounded(rounds: int, events: int, peers: bool, out_dir: Path) -> dict:
    """``run_peers.py`` on ``events`` events; per-round ratios of wall times against speedlayer's."""
    engines = ["speedlayer", "plain", "speedlayer-fast"] + (["python", "bytewax", "flink"] if peers else [])
    out = out_dir / "peers.json"
    size = f"{events // 1_000_000}m" if events % 1_000_000 == 0 else f"{events // 1000}k"
    dataset = BENCH / "peers" / "data" / f"fleet-{size}"  # the peers benchmark's own names (fleet-1m, fleet-200k)
    cmd = [sys.executable, str(BENCH / "peers" / "run_peers.py"), "--events", str(events), "--dataset", str(dataset),
           "--rounds", str(rounds), "--engines", ",".join(engines), "--out", str(out)]
    subprocess.run(cmd, check=True)
    result = json.loads(out.read_text())
    walls = {e: [r["wall_s"] for r in result["runs"][e] if r["ok"]] for e in engines}
    if len(walls["speedlayer"]) != rounds or len(walls["plain"]) != rounds:
        raise SystemExit("bounded: a speedlayer or plain PySpark run failed: its log's end is printed above")

    def speed(engine: str, against: str) -> float | None:  # > 1: ``engine`` ran faster
        if len(walls[engine]) != rounds or len(walls[against]) != rounds:
            return None
        return median_ratio(walls[against], walls[engine])

    return {"events": result["events"], "rounds": rounds, "summary": result["summary"], "wall_s": walls,
            "against_plain": {e: speed(e, "plain") for e in ("speedlayer", "speedlayer-fast")},
            "speedlayer_against": {e: speed("speedlayer", e) for e in engines if e not in ("speedlayer", "plain")}}


def flink_seven(rounds: int, events: int, out: Path) -> dict:
    """The seven outputs, speedlayer against PyFlink's (``bench/flink_seven_check.py``: its check of equal
    rows, then ``rounds`` alternating bounded runs over ``events``), as that script's JSON."""
    subprocess.run([sys.executable, str(BENCH / "flink_seven_check.py"), "--events", str(events),
                    "--rounds", str(rounds), "--out", str(out)], check=True)
    return json.loads(out.read_text())


def read_latency(port: int) -> dict[tuple[str, str], float]:
    """The p99 latency gauges of a run's ``/metrics``, by (query, since), and each query's batches so far,
    their count and their summed duration, by (query, "batches") and (query, "batch_s")."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    families = list(text_string_to_metric_families(text))
    return {**{(s.labels["query"], s.labels["since"]): s.value
               for family in families if family.name == "speedlayer_latency_seconds"
               for s in family.samples if s.labels.get("percentile") == "p99"},
            **{(s.labels["query"], "batches" if s.name.endswith("_count") else "batch_s"): s.value
               for family in families if family.name == "speedlayer_batch_duration_seconds"
               for s in family.samples if s.name.endswith(("_count", "_sum"))}}


def latency(seconds: int, one_query: bool, dashboard: bool = True, extra: tuple[str, ...] = MAKE_RUN_OPTIONS,
            source: str = MAKE_RUN_SOURCE) -> dict:
    """``make run``'s job for ``seconds`` (without its dashboard when ``dashboard`` is false; ``extra``
    options instead of ``make run``'s; on another ``source``), its alerts' p99 latency read every 5 s."""
    from speedlayer.testing.cluster import free_port

    metrics_port, dashboard_port = free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="targets-latency-"))
    shown = ["--dashboard", "--dashboard-port", str(dashboard_port)] if dashboard else ["--no-dashboard"]
    cmd = [str(ROOT / ".venv" / "bin" / "speedlayer"), "run", "fleet", "--source", source, *shown,
           "--no-live", "--duration", str(seconds), "--metrics-port", str(metrics_port), "--state-dir", str(tmp / "state"),
           *(["--one-query"] if one_query else []), *extra]
    began = time.monotonic()
    readings = []
    with open(tmp / "run.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        while proc.poll() is None:
            time.sleep(5)
            try:
                readings.append({"at_s": round(time.monotonic() - began, 1), "p99": read_latency(metrics_port)})
            except OSError:
                continue
    if proc.returncode:
        raise SystemExit(f"latency: the run failed ({proc.returncode}); its log: {tmp / 'run.log'}")
    query = "fleet_shared" if one_query else "fleet_alerts"  # alerts' own query, or the shared one that holds it
    series = [(r["at_s"], r["p99"][(query, "event")], r["p99"].get((query, "ingest"))) for r in readings
              if (query, "event") in r["p99"]]
    steady = [s for s in series if series and s[0] >= series[-1][0] - STEADY_S]
    if not steady:
        raise SystemExit(f"latency: no latency of {query} in /metrics; its log: {tmp / 'run.log'}")
    shutil.rmtree(tmp, ignore_errors=True)
    counted = [r["p99"] for r in readings if (query, "batches") in r["p99"] and r["at_s"] >= steady[0][0]]
    done = counted[-1][(query, "batches")] - counted[0][(query, "batches")] if counted else 0
    # the mean batch over the steady readings, from the duration histogram's count and sum
    batch_s = (counted[-1][(query, "batch_s")] - counted[0][(query, "batch_s")]) / done if done else None
    return {"one_query": one_query, "dashboard": dashboard, "options": list(extra), "source": source,
            "seconds": seconds, "query": query,
            "readings": len(steady),
            "alerts_p99_since_event_s": statistics.median(s[1] for s in steady),
            "alerts_p99_since_event_max_s": max(s[1] for s in steady),
            "alerts_p99_since_ingest_s": statistics.median(s[2] for s in steady if s[2] is not None),
            "alerts_batch_s": batch_s,
            "p99_by_time_s": series}


def table(results: dict) -> str:
    """The markdown table of where each target stands."""
    rows = ["| target | measured | goal | met |", "| --- | --- | --- | --- |"]
    if "whole_job" in results:
        w = results["whole_job"]
        speed = w["events_per_s"]
        for layout, how in (("separate", "as a query each"), ("one", "in one query")):
            ratio, goal = w["ratio_to_plain"][layout], GOALS[f"whole_job_{layout}"]
            rows.append(f"| the seven outputs {how} against plain PySpark's seven (a query each), sustained | "
                        f"{ratio:.3f} ({speed[layout]:,.0f} against {speed['plain']:,.0f} events/s) | {goal}x | "
                        f"{'yes' if ratio >= goal else 'no'} |")
        reads = w["source_reads_per_batch"]
        rows.append(f"| source reads a batch, seven outputs | {reads['one']} in one query, {reads['separate']} as a "
                    f"query each (plain: {reads['plain']}) | 1 | {'yes' if reads['one'] == 1 else 'no'} |")
    if "bounded" in results:
        b = results["bounded"]
        plain, fast = b["against_plain"]["speedlayer"], b["against_plain"]["speedlayer-fast"]
        rows.append(f"| bounded {b['events']:,}-event windows run, start-up included, against plain PySpark | "
                    f"{plain:.2f}x | {GOALS['bounded']}x | {'yes' if plain >= GOALS['bounded'] else 'no'} |")
        if fast is not None:
            rows.append(f"| the same with `--dedup fast` (Spark's dedup alone), against plain PySpark | {fast:.2f}x | "
                        "- | - |")
        for peer, ratio in b["speedlayer_against"].items():
            if ratio is not None and peer != "speedlayer-fast":
                rows.append(f"| the same run, speedlayer against {PEER_NAMES[peer]} | {ratio:.2f}x | ahead (> 1) | "
                            f"{'yes' if ratio > 1 else 'no'} |")
    if "flink_seven" in results:
        f = results["flink_seven"]["measure"]
        ratio = f["median_ratio_flink_over_speedlayer"]
        rows.append(f"| the seven outputs, bounded {f['events']:,} events, start-up included, speedlayer against "
                    f"PyFlink's seven | {ratio:.2f}x ({f['median_wall_s']['speedlayer']:.1f} s against "
                    f"{f['median_wall_s']['flink']:.1f} s) | ahead (> 1) | {'yes' if ratio > 1 else 'no'} |")
    for run in results.get("latency", []):
        how = "`--one-query`" if run["one_query"] else "as `make run`"
        p99 = run["alerts_p99_since_event_s"]
        rows.append(f"| alerts' p99 since the event, `make run`'s job, {how} | {p99:.1f} s (highest "
                    f"{run['alerts_p99_since_event_max_s']:.1f}; {run['alerts_p99_since_ingest_s']:.1f} s since "
                    f"ingest) | at most {GOALS['latency_s']:.0f} s | "
                    f"{'yes' if p99 <= GOALS['latency_s'] else 'no'} |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="1 round, 20,000-event batches, 200,000 bounded events, "
                                                        "60 s of latency, no peers (~6 min)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--rounds", type=int, help="rounds of the whole-job and bounded parts (default 3; --quick 1)")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                   help="the bounded part runs Python, Bytewax and PyFlink too (default: unless --quick; "
                        "their venvs are made on first use)")
    p.add_argument("--latency-seconds", type=int, help="length of each latency run (default 75; --quick 60)")
    p.add_argument("--out", type=Path, help="default bench/results/targets.json (--quick: targets_quick.json)")
    args = p.parse_args()
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"--parts: unknown {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    rounds = args.rounds or (1 if args.quick else 3)
    peers = (not args.quick) if args.peers is None else args.peers
    if peers and {"bounded", "flink-seven"} & set(parts):  # made once; a later call finds them
        print("the peers' own venvs: bench/peers/run_peers.py --setup", flush=True)
        subprocess.run([sys.executable, str(BENCH / "peers" / "run_peers.py"), "--setup"], check=True)
    out = args.out or BENCH / "results" / ("targets_quick.json" if args.quick else "targets.json")
    results: dict = {"benchmark": "targets", "command": " ".join(["bench/targets.py", *sys.argv[1:]]),
                     "load_average_at_start": list(os.getloadavg())}
    if "whole-job" in parts:
        results["whole_job"] = whole_job(rounds, 20_000 if args.quick else 100_000, 3 if args.quick else 4,
                                         1 if args.quick else 2)
    if "bounded" in parts:
        with tempfile.TemporaryDirectory(prefix="targets-") as tmp:
            results["bounded"] = bounded(rounds, 200_000 if args.quick else 1_000_000, peers, Path(tmp))
    if "flink-seven" in parts and not peers:
        print("flink-seven: skipped, it needs the peers (--peers; --quick leaves them out)", flush=True)
    elif "flink-seven" in parts:
        results["flink_seven"] = flink_seven(rounds, 50_000 if args.quick else 200_000,
                                             out.with_name(out.stem + "_flink_seven.json"))
    if "latency" in parts:
        seconds = args.latency_seconds or (60 if args.quick else 75)
        results["latency"] = [latency(seconds, one_query) for one_query in (False, True)]
    results["load_average_at_end"] = list(os.getloadavg())
    results["table"] = table(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print("\n" + results["table"] + f"\n\nwrote {out}")


if __name__ == "__main__":
    main()
