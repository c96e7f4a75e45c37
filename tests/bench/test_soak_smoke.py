"""``bench/soak.py``: its verdicts and parsers on made-up inputs, then a short real run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from speedlayer.runtime.allocator import find_jemalloc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import soak  # noqa: E402
import soak_oracle  # noqa: E402
import soak_probe  # noqa: E402
import soak_trend  # noqa: E402

MINUTES = [m / 2 for m in range(0, 61)]  # 30 minutes, a sample every 30 s
VERDICTS = {"flat", "grows", "noisy", "too few samples", "steady", "speeds up"}


@pytest.mark.parametrize("shape,expect", [
    (lambda m: 500.0, "flat"),
    (lambda m: 500.0 + 40 * min(m, 12), "flat"),            # grows into the first half, then levels off
    (lambda m: 500.0 + 2 * m, "grows"),                       # a steady leak: as much in both halves
    (lambda m: 500.0 + (m > 20) * 5 * (m - 20), "grows"),     # a leak that starts late
    (lambda m: 500.0 + 30 * (-1) ** round(2 * m) + 0.4 * m, "noisy"),  # a sawtooth hides a small rise
])
def test_verdicts(shape, expect):
    assert soak_trend.verdict(MINUTES, [shape(m) for m in MINUTES], warmup_min=5)["verdict"] == expect


def test_the_halves_and_their_slopes():
    v = soak_trend.verdict(MINUTES, [100.0 + 3 * m for m in MINUTES], warmup_min=10)
    first, second = v["first_half"], v["second_half"]
    assert (first["from_min"], second["to_min"]) == (10.0, 30.0)
    assert first["to_min"] < 20 <= second["from_min"]
    assert first["slope_per_min"] == pytest.approx(3) and second["slope_per_min"] == pytest.approx(3)
    assert second["growth"] == pytest.approx(3 * (second["to_min"] - second["from_min"]))


def test_outputs_are_judged_on_their_pace_and_short_runs_say_so():
    steady = soak_trend.verdict(MINUTES, [10.0 * m for m in MINUTES], 5, grows_by_design=True)
    faster = soak_trend.verdict(MINUTES, [m ** 2 for m in MINUTES], 5, grows_by_design=True)
    assert (steady["verdict"], faster["verdict"]) == ("steady", "speeds up")
    assert soak_trend.verdict([0, 1, 2, 3], [1, 2, 3, 4], 0)["verdict"] == "too few samples"
    assert soak_trend.verdict(MINUTES, [None] * 56 + [1.0] * 5, 5)["verdict"] == "too few samples"


def test_quick_and_default_settings():
    quick, default, long = soak.parse_args(["--quick"]), soak.parse_args([]), soak.parse_args(["--minutes", "120"])
    assert (quick.minutes, quick.every, quick.warmup) == (3.0, 10.0, 1.0)
    assert (default.minutes, default.every, default.rate, default.warmup) == (30.0, 30.0, 3000, 10.0)
    assert long.warmup == 10.0 and long.check_minutes == 30.0
    command = soak.run_command("generator://?rate=3000", Path("/w"), 9999, 30)
    assert [command[i + 1] for i, a in enumerate(command) if a == "--sink"] == [
        f"{o}=parquet:/w/out/{o}" for o in ("windows", "alerts", "incidents", "trips", "late", "dead-letters")]
    assert command[command.index("--duration") + 1] == "2700s" and "--no-live" in command
    assert "--trigger" not in command and "--max-state-memory" not in command  # the CLI's own defaults
    assert (default.trigger, default.max_state_memory) == ("processing:10s", "256m")
    given = soak.parse_args(["--trigger", "processing:0s", "--max-state-memory", "1g"])
    spaced = soak.run_command("generator://?rate=3000", Path("/w"), 9999, 30, given.trigger, given.max_state_memory)
    assert spaced[spaced.index("--trigger") + 1] == "processing:0s"
    assert spaced[spaced.index("--max-state-memory") + 1] == "1g"


G1_JSTAT = ("    S0C    S1C    S0U    S1U    EC    EU    OC    OU    MC    MU    CCSC    CCSU    YGC    YGCT    FGC    FGCT"
            "    CGC    CGCT    GCT\n"
            "0.0    8192.0    0.0    8192.0    190464.0    49152.0    325632.0    150528.0    118400.0    115532.2    14464.0"
            "    13127.4    41    0.712    0    0.000    12    0.061    0.773\n")


def test_jstat_and_metrics_parse():
    heap = soak_probe.parse_jstat_gc(G1_JSTAT)
    assert heap["heap_used_mb"] == pytest.approx((8192 + 49152 + 150528) / 1024)
    assert heap["heap_committed_mb"] == pytest.approx((8192 + 190464 + 325632) / 1024)
    assert heap["old_used_mb"] == pytest.approx(147.0) and heap["metaspace_used_mb"] == pytest.approx(115532.2 / 1024)
    assert (heap["young_gcs"], heap["full_gcs"]) == (41, 0)

    text = "\n".join([
        '# TYPE speedlayer_batches_total counter',
        'speedlayer_batches_total{speedlayer_job="fleet",query="fleet_windows"} 7.0',
        '# TYPE speedlayer_state_memory_bytes gauge',
        'speedlayer_state_memory_bytes{speedlayer_job="fleet",query="fleet_windows",operator="1:stateStoreSave"} 2048.0',
        '# TYPE speedlayer_latency_seconds gauge',
        'speedlayer_latency_seconds{speedlayer_job="fleet",query="fleet_windows",since="event",percentile="p99"} 9.0',
        'speedlayer_latency_seconds{speedlayer_job="fleet",query="fleet_windows",since="ingest",percentile="p50"} 1.25',
        '# TYPE speedlayer_batch_duration_seconds histogram',
        'speedlayer_batch_duration_seconds_bucket{speedlayer_job="fleet",query="fleet_windows",le="+Inf"} 7.0',
        'speedlayer_batch_duration_seconds_count{speedlayer_job="fleet",query="fleet_windows"} 7.0',
        'speedlayer_batch_duration_seconds_sum{speedlayer_job="fleet",query="fleet_windows"} 3.5',
        '# TYPE speedlayer_executors gauge',
        'speedlayer_executors{speedlayer_job="fleet"} 1.0', ""])
    q = soak_probe.parse_metrics(text)
    assert list(q) == ["fleet_windows"]
    assert q["fleet_windows"] == {"state_rows": {}, "state_memory_bytes": {"1:stateStoreSave": 2048.0},
                                  "latency_ingest_s": {"p50": 1.25}, "batches": 7.0,
                                  "batch_duration_seconds_count": 7.0, "batch_duration_seconds_sum": 3.5}


def _sample(t: float, batches: int, seconds: float) -> dict:
    query = {"state_rows": {"0:dedupe": 10.0}, "state_memory_bytes": {"0:dedupe": 2e6}, "latency_ingest_s": {"p99": 2.0},
             "batch_duration_seconds_count": batches, "batch_duration_seconds_sum": seconds}
    return {"t_min": t, "rss_mb": {"driver_jvm": 900.0, "python_workers": 80.0, "cli_python": 120.0}, "python_workers": 2,
            "jvm": {"heap_used_mb": 300.0}, "queries": {"fleet_windows": query},
            "disk_mb": {"checkpoints": 5.0, "output windows": t}}


def test_series_take_each_interval_s_mean_batch_duration():
    named = soak.series([_sample(0.5, 2, 3.0), _sample(1.0, 6, 5.0), _sample(1.5, 6, 5.0)])
    assert named["windows batch duration"]["values"] == [1.5, 0.5, None]
    assert named["windows state memory 0:dedupe"]["values"] == [2.0, 2.0, 2.0]
    assert named["rss driver jvm"]["t_min"] == [0.5, 1.0, 1.5]
    assert named["jvm heap committed"]["values"] == [None] * 3
    assert named["disk output windows"]["grows_by_design"] and not named["disk checkpoints"]["grows_by_design"]


def test_the_file_sink_log_and_the_checkpoint_are_read(tmp_path):
    out = tmp_path / "windows"
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "0").write_text('v1\n{"path":"file:///x/part-0.parquet","action":"add"}\n')
    (out / "_spark_metadata" / "1").write_text('v1\n{"path":"file:///x/part%201.parquet","action":"add"}\n')
    assert soak_oracle.committed_files(out) == [Path("/x/part 1.parquet"), Path("/x/part-0.parquet")]

    cp = tmp_path / "cp"
    for d in ("commits", "offsets"):
        (cp / d).mkdir(parents=True)
    for b in (3, 4):
        (cp / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs":{b}000,"batchTimestampMs":1}}\n{b * 10}\n')
    (cp / "commits" / "3").write_text("v1\n{}\n")  # batch 4 planned, never committed
    assert soak_oracle.last_batch(cp, rate=500) == {"batch": 3, "events": 15000, "watermark_ms": 3000}


def test_windows_compare_exactly_or_within_the_late_events():
    t0, t1 = datetime(2026, 1, 1, 10, 0, 0), datetime(2026, 1, 1, 10, 0, 10)
    on_time, every = soak_oracle._Windows(), soak_oracle._Windows()
    on_time.table = {(t0, t1, "V1"): [2, 60.0, 40.0, 0], (t0, t1, "V2"): [1, 10.0, 10.0, 0], (t0, t1, "V3"): [1, 5.0, 5.0, 0]}
    every.table = {**on_time.table, (t0, t1, "V2"): [3, 30.0, 10.0, 0]}

    def row(vehicle, events, avg, top):
        return {"window_start": t0, "window_end": t1, "vehicle_id": vehicle, "events": events, "avg_speed_kmh": avg,
                "max_speed_kmh": top, "over_limit_events": 0}

    found = soak_oracle.compare_windows([row("V1", 2, 30.0, 40.0), row("V2", 3, 10.0, 10.0)], on_time, every, t0)
    assert (found["exact"], found["exact with late events"], found["checked"]) == (1, 1, 2)
    assert found["missing"] == [[str(t0), str(t1), "V3"]] and not found["ok"]
    wrong = soak_oracle.compare_windows([row("V1", 2, 30.5, 40.0)], on_time, every, t0)
    assert len(wrong["mismatched"]) == 1


@pytest.mark.slow
def test_a_short_soak_samples_judges_and_checks_its_outputs(tmp_path):
    out = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "0.4", "--every", "3",
                           "--rate", "500", "--warmup", "0.1", "--out-dir", str(out),
                           "--trigger", "processing:0s"],  # batches enough in 24 s
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "soak-0.4min-processing-0s.json").read_text())
    assert results["machine"]["cores"] == os.cpu_count() and results["machine"]["java"].startswith(("openjdk", "java"))
    assert "speedlayer run fleet" in results["run_command"] and "--metrics-port" in results["run_command"]
    assert "--max-state-memory 256m" in results["run_command"]
    assert results["stop"]["killed"] is False and results["ended_early"] is False and results["up_after_s"] > 0
    assert results["allocator"] == ("jemalloc" if find_jemalloc() else "system")
    named = results["series"]
    for name in ("rss driver jvm", "rss python workers", "rss cli python", "jvm heap used", "jvm heap committed",
                 "windows batch duration", "windows latency since ingest p99", "disk checkpoints", "disk output windows",
                 "driver jvm rss anon", "driver jvm rss file", "driver jvm threads", "driver jvm java heap",
                 "driver jvm native other", "driver jvm code cache"):
        assert name in named, sorted(named)
        assert named[name]["verdict"] in VERDICTS
    assert any(n.startswith("windows state rows ") for n in named), sorted(named)
    assert any(n.startswith("trips state memory ") for n in named), sorted(named)
    last = results["samples"][-1]
    assert 100 < last["rss_mb"]["driver_jvm"] < 20_000 and 20 < last["rss_mb"]["cli_python"] < 5_000
    assert 0 < last["jvm"]["heap_used_mb"] <= last["jvm"]["heap_committed_mb"]
    # a run that goes on commits the driver's heap (2 GB) up front, so its memory does not creep up to it
    assert all(s["jvm"]["heap_committed_mb"] > 1900 for s in results["samples"] if s["jvm"])
    kinds = last["driver_jvm"]  # the JVM's resident memory split by kind adds up to its whole
    assert abs(kinds["rss_anon_mb"] + kinds["rss_file_mb"] + kinds["rss_shmem_mb"] - last["rss_mb"]["driver_jvm"]) < 50
    assert kinds["rss_anon_mb"] > 100 and kinds["threads"] > 20
    held = last["driver_mappings"]  # and by what its mappings hold
    assert abs(sum(held.values()) - last["rss_mb"]["driver_jvm"]) < 50 and held["java heap"] > 50
    # state sampled (not necessarily in the last sample: a batch without data can evict every window first)
    assert any(sum(s["queries"]["fleet_windows"]["state_rows"].values()) > 0
               for s in results["samples"] if "fleet_windows" in s["queries"])
    assert last["disk_mb"]["checkpoints"] > 0 and last["disk_mb"]["output windows"] > 0
    assert named["rss driver jvm"]["first_half"]["samples"] >= 3  # sampled through both halves
    check = results["oracle"]
    assert check["ok"], json.dumps(check, default=str)[:3000]
    assert check["windows"]["checked"] > 100 and check["windows"]["exact"] > 0.8 * check["windows"]["checked"]
    assert check["alerts"]["checked"] > 0 and check["dead-letters"]["expected"] > 0
    assert (out / "soak-0.4min-processing-0s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "verdict" in done.stdout and "rss driver jvm" in done.stdout
