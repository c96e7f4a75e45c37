"""One cell of the latency lab: a query fed at a rate, its rows stamped as they become visible.

``CellMeasurement`` runs a started query (or, for available-now, a scheduler of runs) against a
feed, waits for its first commit, feeds for the cell's span, drains, and fills a ``Cell`` with
latency percentiles, CPU per million events, memory and the batches it saw.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from speedlayer.bench.feed import FilesFeed, SocketFeed, Template
from speedlayer.bench.watch import SinkWatcher, Watched
from speedlayer.core.errors import SpeedlayerError
from speedlayer.runtime.run import Run
from speedlayer.runtime.triggers import Trigger

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
#: the same allowance before the query's first commit, which also starts its Python workers (the
#: lowest-offset dedup's Arrow step): a first batch that takes long is start-up, not falling behind
FIRST_COMMIT_BACKLOG_S = 30.0


@dataclass(frozen=True)
class CellTiming:
    """How long a cell feeds, what it does not measure, how often available-now runs, how often rows are polled."""

    cell_s: float
    warmup_s: float
    schedule_s: float
    poll_ms: float


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


class Cpu:
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


def _check_alive(run: Run) -> None:
    for q in run.queries:
        if not q.isActive and q.exception() is not None:
            raise SpeedlayerError(f"query {q.name} failed: {str(q.exception()).splitlines()[0][:300]}")


def _fell_behind(run: Run, produced: int, rate: int, trigger, backlog_s: float = MAX_BACKLOG_S) -> bool:
    """The query has more than ``backlog_s`` of input fed but not committed (micro-batch only:
    continuous mode reports no input rows per epoch)."""
    if trigger.continuous:
        return False
    p = run.tracker.get(run.plan.queries[0].name)
    return produced - (p.input_rows if p is not None else 0) > backlog_s * rate


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


class CellMeasurement:
    """Measures one cell: ``start(uri, state_dir, name)`` gives a planned, not yet started run of its query.

    >>> CellMeasurement(Cell("alerts", "processing:0s", 2000), timing, trigger, templates, state, landing,
    ...                 "bench_1", cpu, start).run().p99_ms  # doctest: +SKIP
    412.0
    """

    def __init__(self, cell: Cell, timing: CellTiming, trigger: Trigger, templates: list[Template], state: Path,
                 landing: Path, name: str, cpu: Cpu, start: Callable[[str, Path, str], Run]):
        self.cell, self.timing, self.trigger, self.templates = cell, timing, trigger, templates
        self.state, self.landing, self.name, self.cpu, self._start = state, landing, name, cpu, start
        self.scheduled = trigger.kind == "available-now"
        self.watcher = SinkWatcher(cpu.pids, poll_s=timing.poll_ms / 1000)
        self.runs: list[Run] = []
        self.run_s: list[float] = []  # available-now: how long each scheduled run took
        self.feed = None
        self.drained = True
        # what the measured span starts from: time, events fed, CPU of Spark, the feed and the watcher
        self.t_start = self.t_end = 0.0
        self.fed_before, self.feed_cpu0, self.watch_cpu0, self.py0, self.jvm0 = 0, 0.0, 0.0, 0.0, 0.0

    def run(self) -> Cell:
        began = time.monotonic()
        try:
            self._open()
            self._measure()
        except SpeedlayerError as exc:
            self.cell.status, self.cell.reason = FAILED, str(exc)
        finally:
            self._close()
            self.cell.wall_s = round(time.monotonic() - began, 1)
        return self.cell

    def _open(self) -> None:
        """The feed and, for a streaming trigger, its query, started and connected; the watcher on."""
        if self.scheduled:
            self.feed = FilesFeed(self.templates, self.cell.rate, self.landing)
        else:
            self.feed = SocketFeed(self.templates, self.cell.rate)
            run = self._start(self.feed.uri, self.state, self.name)
            self.feed.arm()
            run.start()
            self.runs.append(run)
            if not self.feed.wait_connected(120):
                raise SpeedlayerError("the socket source did not connect to the bench feed within 120 s")
        self.watcher.start()
        for r in self.runs:
            self.watcher.watch(r.queries[0])
        if self.scheduled:
            self.watcher.watch_files(self.state / "out")

    def _measure(self) -> None:
        self.py0, self.jvm0 = self.cpu.sample()
        self.feed.start()
        self.t_start = time.time()
        if not self.scheduled:
            self._await_first_commit()
        self.t_end = self.t_start + self.timing.cell_s
        if self.scheduled:
            self._feed_scheduled()
        else:
            self._feed_streaming()
        self._summarise()

    def _await_first_commit(self) -> None:
        """A new query plans and compiles its first batch slowly: measure from its first commit on.
        (A scheduled available-now run pays that start-up every time: it is part of its latency.)"""
        deadline = time.monotonic() + 300
        while not self.watcher.result.samples and time.monotonic() < deadline:
            if self._behind(FIRST_COMMIT_BACKLOG_S):
                break
            time.sleep(0.05)
        self.t_start = time.time()
        self.py0, self.jvm0 = self.cpu.sample()  # CPU and events are counted from here on, like latency
        self.fed_before, self.feed_cpu0, self.watch_cpu0 = self.feed.produced, self.feed.cpu_s, self.watcher.result.cpu_s

    def _behind(self, backlog_s: float = MAX_BACKLOG_S) -> bool:
        """Raises if the query failed; marks the cell fell-behind when its backlog is too long."""
        _check_alive(self.runs[0])
        if _fell_behind(self.runs[0], self.feed.produced, self.cell.rate, self.trigger, backlog_s):
            self.cell.fell_behind = True
        return self.cell.fell_behind

    def _scheduled_run(self, name: str) -> None:
        run = self._start(self.feed.uri, self.state, name)
        self.runs.append(run)
        began_run = time.monotonic()
        run.start()
        run.wait()
        self.run_s.append(time.monotonic() - began_run)

    def _feed_scheduled(self) -> None:
        """A scheduler starts a run every schedule_s; each processes what has landed, then stops."""
        schedule_s = self.timing.schedule_s
        next_run, k = self.t_start + min(schedule_s, self.timing.cell_s), 0
        while time.time() < self.t_end:
            time.sleep(max(0.0, min(next_run, self.t_end) - time.time()))
            if time.time() >= self.t_end:
                break
            k += 1
            self._scheduled_run(f"{self.name}_{k}")
            next_run += schedule_s
        self.feed.stop()
        self._scheduled_run(f"{self.name}_last")
        # a scheduled run that outlasts its period means the next one starts late: not kept up
        self.drained = max(self.run_s) <= schedule_s
        time.sleep(0.2)  # the watcher's next polls

    def _feed_streaming(self) -> None:
        while time.time() < self.t_end and not self.cell.fell_behind:
            if self._behind():
                break
            time.sleep(0.2)
        self.t_end = min(self.t_end, time.time())
        self.feed.stop()
        if self.trigger.continuous:
            quiet_s = max(2.0, 2 * self.trigger.interval_ms / 1000 + 1.0)
            drain_s, self.drained = _drain_quiet(lambda: self.watcher.result, quiet_s)
        else:
            extra = 1 if self.cell.output == "windows" else 0
            drain_s, self.drained = _drain_batches(self.runs[0], self.feed.produced, extra,
                                                   2 * self.trigger.interval_ms / 1000 + 5)
        self.cell.drain_s = round(drain_s, 1)

    def _summarise(self) -> None:
        cell = self.cell
        py1, jvm1 = self.cpu.sample()
        watched = self.watcher.stop()
        cell.events, cell.produced_rate = self.feed.produced, round(self.feed.produced_rate, 1)
        summarise_latency(cell, watched, (self.t_start + self.timing.warmup_s) * 1000, self.t_end * 1000)
        spark_cpu = ((py1 - self.py0) + (jvm1 - self.jvm0) - (self.feed.cpu_s - self.feed_cpu0)
                     - (watched.cpu_s - self.watch_cpu0))
        counted = cell.events - self.fed_before
        if counted > 0:
            cell.cpu_s_per_million_events = round(spark_cpu / counted * 1e6, 2)
            cell.jvm_cpu_s_per_million_events = round((jvm1 - self.jvm0) / counted * 1e6, 2)
        cell.peak_rss_mb = round(watched.peak_rss_bytes / 2**20, 1)
        if not self.scheduled:  # the files source counts files as input rows, not events
            for r in self.runs:
                cell.batches.extend(_batches(r))
        cell.run_s = [round(x, 1) for x in self.run_s]
        flat = cell.slope is None or cell.slope < FLAT_SLOPE
        cell.drained = self.drained and not cell.fell_behind
        cell.kept_up = bool(cell.rows_measured and flat and cell.drained and cell.produced_rate >= RATE_KEPT * cell.rate)

    def _close(self) -> None:
        try:
            self.watcher.stop() if self.watcher._thread.is_alive() else None
        except Exception:  # noqa: BLE001
            pass
        for r in self.runs:
            try:
                _stop(r)
            except SpeedlayerError:
                pass
            r.cleanup()
        try:
            if self.feed is not None:
                self.feed.stop()
        except Exception:  # noqa: BLE001 — already reported, or the cell failed before the feed ran
            pass
        shutil.rmtree(self.state, ignore_errors=True)
