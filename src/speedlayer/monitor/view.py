"""The live terminal view of a run (rich): rates per query and the latest rows of each console output; where
no view redraws, the same figures as a progress log."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from speedlayer.core.times import iso
from speedlayer.runtime.metrics import BatchMetrics, falling_behind
from speedlayer.sinks.console import BatchView, render_table

if TYPE_CHECKING:
    from speedlayer.runtime.run import Run


#: how often a run without a live view logs each query's progress
PROGRESS_EVERY_S = 60.0


def _ms(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:,.1f}s" if value >= 10_000 else f"{value:,}ms"


def executors_line(run: Run) -> str | None:
    """The view's executors field: ``executors 2 (1 lost), 4 cores · last lost: 1 at 13:50:02Z (Worker lost)``."""
    report = run.executors.poll()
    if report.alive is None:
        return None
    line = report.short()
    if report.lost:
        last = report.lost[-1]
        at = (iso(last.lost_ms) or "").replace("T", " ")[11:19]
        line += f" · last lost: {last.id} at {at}Z" + (f" ({last.reason})" if last.reason else "")
    return line


def _lag(latest: BatchMetrics | None, behind: int | None) -> str:
    """The source's lag after the newest batch, marked when it has been growing (``falling_behind``).

    >>> _lag(None, None), _lag(BatchMetrics("q", 0, 0, 0, 0, 0.0, 0.0, source_lag=1200), 1200)
    ('-', '1,200 (growing: the input is ahead of processing)')
    """
    if latest is None or latest.source_lag is None:
        return "-"
    return f"{latest.source_lag:,}" + (" (growing: the input is ahead of processing)" if behind is not None else "")


def query_figures(run: Run) -> list[dict[str, str]]:
    """Each query's figures as the view shows them: batches, rates, last batch time, latency p50/p95/p99 since
    ingest (since the event, marked, where the source stamps no ingest time), watermark and its lag."""
    progress = run.tracker.snapshot()
    figures = []
    for qp in run.plan.queries:
        p = progress.get(qp.name)
        m = p.latest if p else None
        since, latency = p.leading_latency if p else ("ingest", {})
        figures.append({
            "output": qp.output.name, "sink": qp.sink.describe(), "mode": qp.mode,
            "batches": str(p.batches) if p else "0",
            "input rows/s": f"{p.input_rate:,.0f}" if p else "-",
            "processed rows/s": f"{p.processing_rate:,.0f}" if p else "-",
            "batch": _ms(p.batch_ms) if p else "-",
            "latency since ingest p50/p95/p99": " / ".join(_ms(latency.get(q)) for q in ("p50", "p95", "p99"))
            + ("" if since == "ingest" else " (event)") if latency else "-",
            "watermark": (p.watermark or "-").replace("T", " ").removesuffix(".000Z") if p else "-",
            "wm lag": _ms(m.watermark_lag_ms) if m else "-",
            "source lag": _lag(m, falling_behind(run.tracker.series(qp.name)) if p else None),
        })
    return figures


def rates_table(run: Run) -> Table:
    """One row per query, of ``query_figures``."""
    table = Table(title="queries", title_justify="left", expand=False)
    figures = query_figures(run)
    columns = list(figures[0]) if figures else ["output"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("output", "sink", "mode", "watermark") else "right")
    for row in figures:
        table.add_row(*row.values())
    return table


def progress_lines(run: Run) -> list[str]:
    """A line per query for a log, where no view redraws (output not a terminal, ``--no-live``).

    >>> progress_lines(run)  # doctest: +SKIP
    ['windows: 12 batches, input 5,012 rows/s, processed 6,100 rows/s, batch 1,200ms, latency since ingest ...']
    """
    lines = []
    for row in query_figures(run):
        if row["batches"] == "0":
            lines.append(f"{row['output']}: no batch yet")
            continue
        lines.append(f"{row['output']}: {row['batches']} batches, input {row['input rows/s']} rows/s, processed "
                     f"{row['processed rows/s']} rows/s, batch {row['batch']}, latency since ingest p50/p95/p99 "
                     f"{row['latency since ingest p50/p95/p99']}, watermark {row['watermark']} (lag {row['wm lag']})"
                     + ("" if row["source lag"] == "-" else f", source lag {row['source lag']}"))
    return lines


class ProgressLog:
    """Prints ``progress_lines`` every ``every_s`` seconds while a run goes on, so that a run whose
    output goes to a file or a service's journal says how it does."""

    def __init__(self, console: Console, every_s: float = PROGRESS_EVERY_S):
        self.console = console
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, run: Run) -> None:
        started = time.monotonic()

        def loop() -> None:
            while not self._stop.wait(self.every_s):
                elapsed = time.monotonic() - started
                for line in progress_lines(run):
                    self.console.print(f"{elapsed:,.0f}s {line}", soft_wrap=True, markup=False, highlight=False)

        self._thread = threading.Thread(target=loop, name="speedlayer-progress-log", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


class LiveView:
    """Redraws in place a few times a second while a run goes on; falls back to plain prints."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console()
        self._latest: dict[str, BatchView] = {}
        self._lock = threading.Lock()
        self._run: Run | None = None
        self._live: Live | None = None
        self._started = time.monotonic()
        #: shown in the header when the run serves a dashboard
        self.dashboard_url: str | None = None

    def show_batch(self, view: BatchView) -> None:
        """Replace the rows shown for ``view.output`` (called from each console sink's batch)."""
        with self._lock:
            self._latest[view.output] = view

    def __rich__(self) -> Group:
        parts = []
        if self._run is not None:
            plan = self._run.plan
            elapsed = time.monotonic() - self._started
            header = (f"[b]{plan.job.name}[/b] · {plan.source.describe()} · trigger {plan.trigger} · "
                      f"{elapsed:,.0f}s · Ctrl-C stops after the current batch")
            executors = executors_line(self._run)
            if executors:
                header += f"\n{escape(executors)}"
            if self.dashboard_url:
                header += f"\ndashboard [link={self.dashboard_url}]{self.dashboard_url}[/link]"
            parts.append(Panel(header, expand=False))
            parts.append(rates_table(self._run))
        with self._lock:
            parts.extend(render_table(v) for v in self._latest.values())
        return Group(*parts)

    def attach(self, run: Run) -> None:
        self._run = run
        self._started = time.monotonic()
        self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
