"""The latency lab: the fleet outputs under every trigger at a series of input rates.

Each cell (output, trigger, rate) is one query started through the runner (``plan_run`` / ``Run``)
in one shared SparkSession: a ``Feed`` writes stamped events at the rate (a socket for
micro-batch and continuous, a landing directory for available-now, which a scheduler re-runs
every ``schedule_s``), the output goes to a ``LatencySink`` and a ``SinkWatcher`` stamps every
row when it becomes visible. A trigger the output cannot run in is reported "not supported"
with the runner's own reason (its one-line ConfigError), and the lab goes on.

    >>> result = run_lab(spark, LabConfig.quick(), Path("out/bench"))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from speedlayer.bench.advice import fit_batch_cost
from speedlayer.bench.feed import FilesFeed, SocketFeed, Template
from speedlayer.bench.watch import LatencyParquetSink, LatencySink, SinkWatcher, Watched
from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError, SpeedlayerError
from speedlayer.runtime.plan import plan_run, prepare_state
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.runtime.triggers import parse_trigger

MODES = ("processing:0s", "processing:100ms", "processing:1s", "processing:5s", "available-now", "continuous:1s",
         "realtime:")
OUTPUTS = ("windows", "alerts")
NOT_SUPPORTED, OK, FAILED = "not supported", "ok", "failed"
#: latency counts as flat when each commit's slowest row grows older by less than this many seconds per second
FLAT_SLOPE = 0.05
#: the feed must have written at least this share of the target rate for the cell to count as kept up
RATE_KEPT = 0.95
#: a row not seen by then counts as lost to the measurement
MAX_DRAIN_S = 60.0
#: a query this many seconds of input behind the feed ends its cell early, as not kept up: Spark's
#: socket source holds the backlog on the driver and ships it inside one task, which ran a 2 GB heap
#: (and an 8 GB one) out of memory at 50,000 events/s
MAX_BACKLOG_S = 10.0


@dataclass(frozen=True)
class LabConfig:
    outputs: tuple[str, ...] = OUTPUTS
    modes: tuple[str, ...] = MODES
    rates: tuple[int, ...] = (1_000, 10_000, 50_000, 100_000)
    cell_s: float = 30.0
    warmup_s: float = 5.0
    window: str = "10s"
    watermark: str = "5s"
    vehicles: int = 200
    templates: int = 20_000
    #: available-now: a scheduler starts a run every this many seconds
    schedule_s: float = 10.0
    poll_ms: float = 5.0
    master: str = "local[2]"

    @classmethod
    def quick(cls) -> LabConfig:
        """Every trigger and both outputs at one small rate, 3 s cells and 2 s windows (2 min 30 s on 2 idle cores).

        Two rates took 4 min 22 s on a quiet machine: the windows cells wait for their last window
        to close, which costs the same at any rate, so a second rate doubles the time and adds
        little to a smoke run.
        """
        return cls(rates=(2_000,), cell_s=3.0, warmup_s=0.5, window="2s", watermark="1s",
                   templates=4_000, schedule_s=1.5)

    def check(self) -> None:
        for output in self.outputs:
            if output not in OUTPUTS:
                raise ConfigError(f"the bench measures the outputs {', '.join(OUTPUTS)}, not {output!r}")
        for mode in self.modes:
            parse_trigger(mode)
            if mode.split(":")[0] == "once":
                raise ConfigError("the bench runs available-now for scheduled batches, not once: drop --mode once")
        if not self.rates or min(self.rates) <= 0:
            raise ConfigError("--rate must be above zero events/s")
        if self.warmup_s >= self.cell_s:
            raise ConfigError(f"the warm-up ({self.warmup_s:g}s) must be shorter than a cell ({self.cell_s:g}s)")
        parse_duration(self.window, "--window")
        parse_duration(self.watermark, "--watermark")


@dataclass
class Cell:
    output: str
    mode: str
    rate: int
    status: str = OK
    reason: str = ""
    produced_rate: float = 0.0
    events: int = 0
    rows_measured: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    slope: float | None = None
    kept_up: bool | None = None
    cpu_s_per_million_events: float | None = None
    jvm_cpu_s_per_million_events: float | None = None
    peak_rss_mb: float | None = None
    batches: list[list[int]] = field(default_factory=list)  # [input rows, triggerExecution ms] per micro-batch
    drain_s: float = 0.0
    #: every fed event reached the sink within MAX_DRAIN_S after the feed stopped
    drained: bool | None = None
    #: the query fell MAX_BACKLOG_S of input behind the feed, which then stopped early
    fell_behind: bool = False
    #: the cell's whole wall time: query start, feeding, draining, stop
    wall_s: float = 0.0
    #: available-now: how long each scheduled run took (start to stop)
    run_s: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list.

    >>> percentile([1, 2, 3, 4], 50), percentile([1, 2, 3, 4], 99)
    (2, 4)
    """
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x (None with fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def summarise_latency(cell: Cell, watched: Watched, due_from_ms: float, due_until_ms: float) -> None:
    """Percentiles over the rows due in the measured span; the trend of each commit's slowest row."""
    rows = watched.latencies_ms(due_from_ms, due_until_ms)
    cell.rows_measured = len(rows)
    if not rows:
        return
    lat = [latency for _, latency in rows]
    cell.p50_ms, cell.p95_ms, cell.p99_ms = (round(percentile(lat, q), 1) for q in (50, 95, 99))
    cell.max_ms = round(max(lat), 1)
    # Within one commit latency falls with due time by construction, so the trend is taken over
    # commits: a query that falls behind commits ever older rows.
    worst = [(s.seen_ms / 1000, max(s.seen_ms - d for d in s.due_ms) / 1000) for s in watched.samples
             if any(due_from_ms <= d < due_until_ms for d in s.due_ms)]
    trend = slope(worst) if len(worst) >= 3 else None
    cell.slope = None if trend is None else round(trend, 4)


class _Cpu:
    """CPU seconds of this Python process and the driver JVM (psutil), and peak-RSS pids."""

    def __init__(self, spark):
        import psutil
        from pyspark import SparkContext

        self.me = psutil.Process(os.getpid())
        proc = getattr(SparkContext._gateway, "proc", None)
        self.jvm = psutil.Process(proc.pid) if proc is not None else None

    @staticmethod
    def _cpu(p) -> float:
        t = p.cpu_times()
        return t.user + t.system

    def sample(self) -> tuple[float, float]:
        return self._cpu(self.me), (self._cpu(self.jvm) if self.jvm else 0.0)

    @property
    def pids(self) -> list[int]:
        return [self.me.pid] + ([self.jvm.pid] if self.jvm else [])


def _settings(cfg: LabConfig, output: str, mode: str, source: str, state_dir: Path) -> RunSettings:
    return RunSettings(job="fleet", source=source, sinks={output: "memory:bench_probe"}, trigger=mode,
                       window=cfg.window, watermark=cfg.watermark, state_dir=str(state_dir), master=cfg.master)


def support(cfg: LabConfig, output: str, mode: str, tmp: Path) -> str | None:
    """None when the runner accepts this output under this trigger, else its one-line reason."""
    source = "socket://127.0.0.1:9" if parse_trigger(mode).kind != "available-now" else f"files://{tmp}"
    try:
        plan_run(_settings(cfg, output, mode, source, tmp / "unused"))
    except ConfigError as exc:
        return str(exc)
    return None


def _start(spark, cfg: LabConfig, output: str, mode: str, uri: str, state_dir: Path, table: str) -> Run:
    """A planned run of one output into a latency sink: memory, or Parquet under ``state_dir`` for
    available-now (its scheduled runs resume from the checkpoint, which the memory sink cannot)."""
    plan = plan_run(_settings(cfg, output, mode, uri, state_dir))
    watermark_ms = parse_duration(cfg.watermark)
    if plan.trigger.kind == "available-now":
        plan.queries[0].sink = LatencyParquetSink(state_dir / "out", output, watermark_ms)
    else:
        plan.queries[0].sink = LatencySink(table, output, watermark_ms)
    prepare_state(plan)
    return Run(spark, plan)


def _check_alive(run: Run) -> None:
    for q in run.queries:
        if not q.isActive and q.exception() is not None:
            raise SpeedlayerError(f"query {q.name} failed: {str(q.exception()).splitlines()[0][:300]}")


def _fell_behind(run: Run, produced: int, rate: int, trigger) -> bool:
    """The query has more than MAX_BACKLOG_S of input fed but not committed (micro-batch only:
    continuous mode reports no input rows per epoch)."""
    if trigger.continuous:
        return False
    p = run.tracker.get(run.plan.queries[0].name)
    return produced - (p.input_rows if p is not None else 0) > MAX_BACKLOG_S * rate


def _batches(run: Run) -> list[list[int]]:
    out = []
    for q in run.queries:
        for p in q.recentProgress:
            rows = int(p.numInputRows or 0)
            ms = int((p.durationMs or {}).get("triggerExecution", 0))
            if rows > 0 and ms > 0:
                out.append([rows, ms])
    return out


def _stop(run: Run) -> None:
    run.stop_requested.set()
    run.wait()


def _drain_quiet(watched_fn: Callable[[], Watched], quiet_s: float) -> tuple[float, bool]:
    """Continuous mode has no batches to count: wait until rows stop arriving for ``quiet_s``."""
    t0 = time.monotonic()
    last_count, last_change = -1, t0
    while time.monotonic() - t0 < MAX_DRAIN_S:
        count = sum(len(s.due_ms) for s in watched_fn().samples)
        now = time.monotonic()
        if count != last_count:
            last_count, last_change = count, now
        if count > 0 and now - last_change >= quiet_s:
            return now - t0, True
        time.sleep(0.05)
    return time.monotonic() - t0, False


def _drain_batches(run: Run, produced: int, extra_batches: int, extra_s: float) -> tuple[float, bool]:
    """Wait until the query has committed every fed event, then ``extra_batches`` more (a window
    output closes its last windows in the batch after the one that moved the watermark)."""
    t0 = time.monotonic()
    name, reached, reached_at = run.plan.queries[0].name, None, 0.0
    while time.monotonic() - t0 < MAX_DRAIN_S:
        _check_alive(run)
        p = run.tracker.get(name)
        if p is not None and p.input_rows >= produced:
            if reached is None:
                reached, reached_at = p.batches, time.monotonic()
            if p.batches >= reached + extra_batches or time.monotonic() - reached_at > extra_s:
                time.sleep(0.2)  # the watcher's next polls
                return time.monotonic() - t0, True
        time.sleep(0.05)
    return time.monotonic() - t0, False


def run_cell(spark, cfg: LabConfig, templates: list[Template], output: str, mode: str, rate: int, tmp: Path,
             cpu: _Cpu, index: int) -> Cell:
    """Measure one (output, trigger, rate) cell; a cell whose query fails is reported, not raised."""
    cell = Cell(output, mode, rate)
    began = time.monotonic()
    reason = support(cfg, output, mode, tmp)
    if reason is not None:
        cell.status, cell.reason = NOT_SUPPORTED, reason
        return cell
    trigger = parse_trigger(mode)
    state = tmp / f"cell-{index}"
    watcher = SinkWatcher(cpu.pids, poll_s=cfg.poll_ms / 1000)
    quiet_s = max(2.0, 2 * trigger.interval_ms / 1000 + 1.0)
    drained = True
    runs: list[Run] = []
    run_s: list[float] = []  # available-now: how long each scheduled run took
    try:
        if trigger.kind == "available-now":
            feed = FilesFeed(templates, rate, tmp / f"landing-{index}")
        else:
            feed = SocketFeed(templates, rate)
            run = _start(spark, cfg, output, mode, feed.uri, state, f"bench_{index}")
            feed.arm()
            run.start()
            runs.append(run)
            if not feed.wait_connected(120):
                raise SpeedlayerError("the socket source did not connect to the bench feed within 120 s")
        watcher.start()
        for r in runs:
            watcher.watch(r.queries[0])
        if trigger.kind == "available-now":
            watcher.watch_files(state / "out")
        py0, jvm0 = cpu.sample()
        feed.start()
        t_start = time.time()
        fed_before, feed_cpu0, watch_cpu0 = 0, 0.0, 0.0
        if trigger.kind != "available-now":
            # A new query plans and compiles its first batch slowly: measure from its first commit on.
            # (A scheduled available-now run pays that start-up every time: it is part of its latency.)
            deadline = time.monotonic() + 300
            while not watcher.result.samples and time.monotonic() < deadline:
                _check_alive(runs[0])
                if _fell_behind(runs[0], feed.produced, rate, trigger):
                    cell.fell_behind = True
                    break
                time.sleep(0.05)
            t_start = time.time()
            py0, jvm0 = cpu.sample()  # CPU and events are counted from here on, like latency
            fed_before, feed_cpu0, watch_cpu0 = feed.produced, feed.cpu_s, watcher.result.cpu_s
        t_end = t_start + cfg.cell_s
        if trigger.kind == "available-now":
            # a scheduler starts a run every schedule_s; each processes what has landed, then stops
            def scheduled_run(name: str) -> None:
                run = _start(spark, cfg, output, mode, feed.uri, state, name)
                runs.append(run)
                began_run = time.monotonic()
                run.start()
                run.wait()
                run_s.append(time.monotonic() - began_run)

            next_run, k = t_start + min(cfg.schedule_s, cfg.cell_s), 0
            while time.time() < t_end:
                time.sleep(max(0.0, min(next_run, t_end) - time.time()))
                if time.time() >= t_end:
                    break
                k += 1
                scheduled_run(f"bench_{index}_{k}")
                next_run += cfg.schedule_s
            feed.stop()
            scheduled_run(f"bench_{index}_last")
            # a scheduled run that outlasts its period means the next one starts late: not kept up
            drained = max(run_s) <= cfg.schedule_s
            time.sleep(0.2)  # the watcher's next polls
        else:
            while time.time() < t_end and not cell.fell_behind:
                _check_alive(runs[0])
                if _fell_behind(runs[0], feed.produced, rate, trigger):
                    cell.fell_behind = True
                    break
                time.sleep(0.2)
            t_end = min(t_end, time.time())
            feed.stop()
            if trigger.continuous:
                cell.drain_s, drained = _drain_quiet(lambda: watcher.result, quiet_s)
            else:
                cell.drain_s, drained = _drain_batches(runs[0], feed.produced, 1 if output == "windows" else 0,
                                                       2 * trigger.interval_ms / 1000 + 5)
            cell.drain_s = round(cell.drain_s, 1)
        py1, jvm1 = cpu.sample()
        watched = watcher.stop()
        cell.events, cell.produced_rate = feed.produced, round(feed.produced_rate, 1)
        summarise_latency(cell, watched, (t_start + cfg.warmup_s) * 1000, t_end * 1000)
        spark_cpu = (py1 - py0) + (jvm1 - jvm0) - (feed.cpu_s - feed_cpu0) - (watched.cpu_s - watch_cpu0)
        counted = cell.events - fed_before
        if counted > 0:
            cell.cpu_s_per_million_events = round(spark_cpu / counted * 1e6, 2)
            cell.jvm_cpu_s_per_million_events = round((jvm1 - jvm0) / counted * 1e6, 2)
        cell.peak_rss_mb = round(watched.peak_rss_bytes / 2**20, 1)
        if trigger.kind != "available-now":  # the files source counts files as input rows, not events
            for r in runs:
                cell.batches.extend(_batches(r))
        cell.run_s = [round(x, 1) for x in run_s]
        flat = cell.slope is None or cell.slope < FLAT_SLOPE
        cell.drained = drained and not cell.fell_behind
        cell.kept_up = bool(cell.rows_measured and flat and cell.drained and cell.produced_rate >= RATE_KEPT * rate)
    except SpeedlayerError as exc:
        cell.status, cell.reason = FAILED, str(exc)
    finally:
        try:
            watcher.stop() if watcher._thread.is_alive() else None
        except Exception:  # noqa: BLE001
            pass
        for r in runs:
            try:
                _stop(r)
            except SpeedlayerError:
                pass
            r.cleanup()
        try:
            feed.stop()
        except Exception:  # noqa: BLE001 — already reported, or the cell failed before the feed ran
            pass
        shutil.rmtree(state, ignore_errors=True)
        cell.wall_s = round(time.monotonic() - began, 1)
    return cell


def sustained(cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """Per output and trigger: the highest rate kept up with (None if none), and its p99."""
    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        entry = out.setdefault(c.output, {}).setdefault(c.mode, {"rate": None, "p99_ms": None, "status": c.status,
                                                                 "reason": c.reason})
        if c.status == OK and c.kept_up and (entry["rate"] is None or c.rate > entry["rate"]):
            entry.update(rate=c.rate, p99_ms=c.p99_ms, status=OK)
        elif c.status == OK and entry["status"] != OK:
            entry["status"] = OK
    return out


def run_lab(spark, cfg: LabConfig, on_cell: Callable[[Cell], None] | None = None) -> dict[str, Any]:
    """Run every cell of ``cfg`` and return the results (what ``bench.json`` holds)."""
    import platform

    import pyspark

    from speedlayer.bench.feed import templates_from_generator

    cfg.check()
    tmp = Path(tempfile.mkdtemp(prefix="speedlayer-bench-"))
    t0 = time.time()
    cells: list[Cell] = []
    try:
        templates = templates_from_generator(spark, cfg.templates, cfg.vehicles)
        cpu = _Cpu(spark)
        index = 0
        for output in cfg.outputs:
            for mode in cfg.modes:
                for rate in cfg.rates:
                    index += 1
                    cell = run_cell(spark, cfg, templates, output, mode, rate, tmp, cpu, index)
                    cells.append(cell)
                    if on_cell:
                        on_cell(cell)
                    if cell.status == NOT_SUPPORTED:
                        for other in cfg.rates[cfg.rates.index(rate) + 1:]:  # same reason at every rate
                            cells.append(replace(cell, rate=other))
                        break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    points = [tuple(b) for c in cells for b in c.batches]
    try:
        fit = asdict(fit_batch_cost(points))
    except ValueError:
        fit = None
    return {
        "benchmark": "latency_lab",
        "config": asdict(cfg),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
                    "load_average_at_start": list(os.getloadavg())},
        "elapsed_s": round(time.time() - t0, 1),
        "cells": [asdict(c) for c in cells],
        "sustained": sustained(cells),
        "batch_cost": fit,
    }


def batch_points(results: dict[str, Any], output: str | None = None) -> list[tuple[int, int]]:
    """(input rows, ms) of every measured micro-batch in a results dict, optionally of one output."""
    return [tuple(b) for c in results["cells"] if output in (None, c["output"]) for b in c["batches"]]

